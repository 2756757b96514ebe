// The host backends' calling convention for the ops of the vocabulary (op.h): a backend
// is a table of these functions; `reference` is the plain definition of each op, `cpu`
// the fast path (OpenBLAS GEMM, OpenMP), checked against the reference by tests/ops
// (test_ops, modes `test`, `grad` and `perf`). The CUDA backend implements the same ops
// with device pointers, dtypes and streams (ops/cuda/cuda_ops.cuh).
//
// Layout conventions (row-major, fp32 on the host):
//   N = rows (B*T tokens), C = channels, OC = output channels, V = vocabulary,
//   NH = heads, HS = C/NH head size.
// Backward conventions: parameter gradients ACCUMULATE (+=). Activation gradients
// OVERWRITE, except where a comment says "accumulates" (layernorm's dinp and
// residual's dinp, because the residual stream sums several contributions).
#pragma once
#include <cstdint>
#include <string_view>

#include "aiscale/ops/op.h"

namespace aiscale::ops {

struct AdamWParams {
  float lr = 3e-4f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;  // decoupled: p -= lr * wd * p
  int64_t step = 1;           // 1-based, for bias correction
  float grad_scale = 1.0f;    // gradients are multiplied by this first (clipping, unscaling)
};

struct Backend {
  const char* name;

  // out (N, OC) = inp (N, C) @ weight (OC, C)^T + bias (OC); bias may be null.
  void (*matmul_forward)(float* out, const float* inp, const float* weight, const float* bias,
                         int64_t N, int64_t C, int64_t OC);
  // dinp (N, C) overwritten; dweight (OC, C) +=; dbias (OC) += (may be null).
  void (*matmul_backward)(float* dinp, float* dweight, float* dbias, const float* dout,
                          const float* inp, const float* weight, int64_t N, int64_t C, int64_t OC);

  // out (B, T, C) = wte[tokens[b, t]] + wpe[t]; wte (V, C), wpe (maxT >= T, C) or null (no
  // position embedding: out = wte[tokens]).
  void (*embedding_forward)(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                            int64_t B, int64_t T, int64_t C);
  // dwte (V, C) +=, dwpe (maxT, C) += (null: none).
  void (*embedding_backward)(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                             int64_t B, int64_t T, int64_t C);

  // out (N, C) = (inp - mean) * rstd * weight + bias; mean, rstd (N) saved for backward.
  void (*layernorm_forward)(float* out, float* mean, float* rstd, const float* inp,
                            const float* weight, const float* bias, int64_t N, int64_t C);
  // dinp (N, C) ACCUMULATES; dweight, dbias (C) +=.
  void (*layernorm_backward)(float* dinp, float* dweight, float* dbias, const float* dout,
                             const float* inp, const float* weight, const float* mean,
                             const float* rstd, int64_t N, int64_t C);

  // GELU, tanh approximation, elementwise over n values.
  void (*gelu_forward)(float* out, const float* inp, int64_t n);
  // dinp overwritten (may alias dout).
  void (*gelu_backward)(float* dinp, const float* inp, const float* dout, int64_t n);

  // Causal multi-head attention. qkv (B, T, 3C) holds Q, K, V concatenated along the
  // channels; out (B, T, C); att (B, NH, T, T) softmax probabilities saved for backward
  // (entries above the diagonal are written as 0).
  void (*attention_forward)(float* out, float* att, const float* qkv, int64_t B, int64_t T,
                            int64_t C, int64_t NH);
  // dqkv (B, T, 3C) overwritten; datt (B, NH, T, T) is scratch.
  void (*attention_backward)(float* dqkv, float* datt, const float* dout, const float* qkv,
                             const float* att, int64_t B, int64_t T, int64_t C, int64_t NH);

  // out = a + b over n values.
  void (*residual_forward)(float* out, const float* a, const float* b, int64_t n);
  // da += dout; db += dout (both ACCUMULATE).
  void (*residual_backward)(float* da, float* db, const float* dout, int64_t n);

  // losses (N) = -log softmax(logits (N, V))[target]. targets in [0, V).
  void (*softmax_xent_forward)(float* losses, const float* logits, const int32_t* targets,
                               int64_t N, int64_t V);
  // dlogits (N, V) overwritten = dlosses[i] * (softmax(logits[i]) - onehot(target[i])).
  // dlogits may alias logits (in-place, the usual case for a 50k vocabulary).
  void (*softmax_xent_backward)(float* dlogits, const float* logits, const int32_t* targets,
                                const float* dlosses, int64_t N, int64_t V);

  // One AdamW step over n values: m, v moments updated in place; params updated.
  void (*adamw_update)(float* params, const float* grads, float* m, float* v, int64_t n,
                       const AdamWParams& hp);

  // The llama family's ops.
  // RMSNorm: out (N, C) = inp * rstd * weight, rstd (N) = 1 / sqrt(mean(inp^2) + eps),
  // statistics in fp32 (double in the reference), saved for backward.
  void (*rmsnorm_forward)(float* out, float* rstd, const float* inp, const float* weight,
                          int64_t N, int64_t C, float eps);
  // dinp (N, C) ACCUMULATES (a residual-stream gradient, like layernorm's); dweight (C) +=.
  void (*rmsnorm_backward)(float* dinp, float* dweight, const float* dout, const float* inp,
                           const float* weight, const float* rstd, int64_t N, int64_t C);

  // Rotary positions on fused QKV activations (N, (NH + 2 NKV) HS): the NH query heads,
  // then NKV key heads, then NKV value heads, HS channels each; row n is position n % T.
  // Each Q and K head is rotated in the "rotate half" layout: for i < HS/2 the pair
  // (x_i, x_{i+HS/2}) -> (x_i cos - x_{i+HS/2} sin, x_{i+HS/2} cos + x_i sin), with
  // cos, sin (T, HS/2) the angle tables (nn/models/gpt_rope.h). The V heads are copied.
  // out may alias inp (in place).
  void (*rope_forward)(float* out, const float* inp, const float* cos, const float* sin,
                       int64_t N, int64_t T, int64_t NH, int64_t NKV, int64_t HS);
  // dinp overwritten (the inverse rotation of dout; V copied); may alias dout.
  void (*rope_backward)(float* dinp, const float* dout, const float* cos, const float* sin,
                        int64_t N, int64_t T, int64_t NH, int64_t NKV, int64_t HS);

  // SwiGLU: inp (N, 2F) holds gate (columns [0, F)) and up ([F, 2F)) of each row;
  // out (N, F) = silu(gate) * up, silu(x) = x sigmoid(x).
  void (*swiglu_forward)(float* out, const float* inp, int64_t N, int64_t F);
  // dinp (N, 2F) overwritten.
  void (*swiglu_backward)(float* dinp, const float* inp, const float* dout, int64_t N, int64_t F);

  // Causal grouped-query attention: qkv (B, T, C + 2 KC), KC = NKV * C / NH, holds the NH
  // query heads, then NKV key heads and NKV value heads; query head h attends with key/value
  // head h / (NH / NKV). out (B, T, C); att (B, NH, T, T) as attention_forward's. With
  // NKV == NH it is attention_forward.
  void (*attention_gqa_forward)(float* out, float* att, const float* qkv, int64_t B, int64_t T,
                                int64_t C, int64_t NH, int64_t NKV);
  // dqkv (B, T, C + 2 KC) overwritten; datt (B, NH, T, T) is scratch.
  void (*attention_gqa_backward)(float* dqkv, float* datt, const float* dout, const float* qkv,
                                 const float* att, int64_t B, int64_t T, int64_t C, int64_t NH,
                                 int64_t NKV);
};

// A backend's multi-head attention: its grouped-query attention with as many key/value
// heads as query heads.
template <auto GqaForward>
void mha_forward(float* out, float* att, const float* qkv, int64_t B, int64_t T, int64_t C,
                 int64_t NH) {
  GqaForward(out, att, qkv, B, T, C, NH, NH);
}
template <auto GqaBackward>
void mha_backward(float* dqkv, float* datt, const float* dout, const float* qkv, const float* att,
                  int64_t B, int64_t T, int64_t C, int64_t NH) {
  GqaBackward(dqkv, datt, dout, qkv, att, B, T, C, NH, NH);
}

// The ops of the vocabulary that the host table holds (one function pointer each, in the
// order of Op). The others are either free functions shared by the host backends
// (sum_squares, fp8_quantize and fp8_scale_update of ops/fp8.h) or fused steps that only the CUDA backend has as ops of their own (on the
// host they are part of another op: bias_grad of matmul_backward, ...).
constexpr bool in_host_table(Op op) {
  return static_cast<int>(op) <= static_cast<int>(Op::adamw_update) ||
         (static_cast<int>(op) >= static_cast<int>(Op::rmsnorm_forward) &&
          static_cast<int>(op) <= static_cast<int>(Op::attention_gqa_backward));
}
constexpr int host_table_op_count() {
  int n = 0;
  for (int i = 0; i < kOpCount; ++i) n += in_host_table(static_cast<Op>(i)) ? 1 : 0;
  return n;
}
static_assert(sizeof(Backend) == sizeof(const char*) + host_table_op_count() * sizeof(void (*)()),
              "Backend changed: update Op (op.h), in_host_table, every table and tests/ops");

// The table's entry for op, or null where op is not in the host table.
const void* host_entry(const Backend& backend, Op op);

const Backend& reference_backend();
const Backend& cpu_backend();

// Backend by name: "reference" or "cpu". Throws Error for anything else.
const Backend& backend_by_name(std::string_view name);

// Sum of squares of n values, in double (for global-norm clipping).
double sum_squares(const float* x, int64_t n);

// The heads of a causal attention over fused rows q | k | v of C + 2 KC values: head size
// HS = C / NH, KC = NKV * HS, row width W, and query heads per key/value head. Throws Error
// unless NH divides C and NKV divides NH.
struct AttentionHeads {
  int64_t HS, KC, W, group;
};
AttentionHeads attention_heads(int64_t C, int64_t NH, int64_t NKV);

}  // namespace aiscale::ops
