// The fast CPU ops, one .cpp per op family in this folder; cpu_backend.cpp gathers them
// into the table. Signatures and conventions are those of ops::Backend (ops.h).
#pragma once
#include <cstdint>

#include "aiscale/ops/ops.h"

namespace aiscale::ops::cpu {

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias,
                    int64_t N, int64_t C, int64_t OC);
void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                     const float* inp, const float* weight, int64_t N, int64_t C, int64_t OC);

void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                       int64_t B, int64_t T, int64_t C);
void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                        int64_t B, int64_t T, int64_t C);

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                       const float* weight, const float* bias, int64_t N, int64_t C);
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean,
                        const float* rstd, int64_t N, int64_t C);

void gelu_forward(float* out, const float* inp, int64_t n);
void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n);

void residual_forward(float* out, const float* a, const float* b, int64_t n);
void residual_backward(float* da, float* db, const float* dout, int64_t n);

void softmax_xent_forward(float* losses, const float* logits, const int32_t* targets,
                          int64_t N, int64_t V);
void softmax_xent_backward(float* dlogits, const float* logits, const int32_t* targets,
                           const float* dlosses, int64_t N, int64_t V);

void adamw_update(float* params, const float* grads, float* m, float* v, int64_t n,
                  const AdamWParams& hp);

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int64_t N,
                     int64_t C, float eps);
void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                      const float* weight, const float* rstd, int64_t N, int64_t C);
void rope_forward(float* out, const float* inp, const float* cos, const float* sin, int64_t N,
                  int64_t T, int64_t NH, int64_t NKV, int64_t HS);
void rope_backward(float* dinp, const float* dout, const float* cos, const float* sin, int64_t N,
                   int64_t T, int64_t NH, int64_t NKV, int64_t HS);
void swiglu_forward(float* out, const float* inp, int64_t N, int64_t F);
void swiglu_backward(float* dinp, const float* inp, const float* dout, int64_t N, int64_t F);
void attention_gqa_forward(float* out, float* att, const float* qkv, int64_t B, int64_t T,
                           int64_t C, int64_t NH, int64_t NKV);
void attention_gqa_backward(float* dqkv, float* datt, const float* dout, const float* qkv,
                            const float* att, int64_t B, int64_t T, int64_t C, int64_t NH,
                            int64_t NKV);

}  // namespace aiscale::ops::cpu
