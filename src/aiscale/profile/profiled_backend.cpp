#include "aiscale/profile/profiled_backend.h"

#include "aiscale/core/error.h"

namespace aiscale::profile {
namespace {

struct Target {
  const ops::Backend* inner = nullptr;
  OpProfiler* profiler = nullptr;
};
thread_local Target t_target;

const Target& target() {
  if (!t_target.inner)
    fail("internal: a profiled op table was called from a thread it was not made for");
  return t_target;
}

// Calls the inner backend's entry `member` and records one span of `op` with its work.
template <auto Member, typename... Args>
void timed(ops::Op op, double flops, double bytes, Args... args) {
  const Target& t = target();
  ScopedSpan span(t.profiler, ops::op_name(op).data(), SpanKind::op, kHostTrack, flops, bytes);
  (t.inner->*Member)(args...);
}

using ops::Op;
constexpr double F = 4.0;  // bytes per fp32 value
double d(int64_t v) { return static_cast<double>(v); }

// Work and traffic of each op, from its signature (ops.h). FLOPs count a multiply-add as 2;
// bytes count each array read or written once.
void matmul_forward(float* out, const float* inp, const float* w, const float* b, int64_t N,
                    int64_t C, int64_t OC) {
  timed<&ops::Backend::matmul_forward>(Op::matmul_forward, 2 * d(N) * d(C) * d(OC),
                                       F * (d(N) * d(C) + d(OC) * d(C) + d(N) * d(OC)), out, inp,
                                       w, b, N, C, OC);
}
void matmul_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp,
                     const float* w, int64_t N, int64_t C, int64_t OC) {
  timed<&ops::Backend::matmul_backward>(
      Op::matmul_backward, 4 * d(N) * d(C) * d(OC) + (db ? d(N) * d(OC) : 0),
      F * (d(N) * d(OC) + 2 * d(N) * d(C) + 3 * d(OC) * d(C)), dinp, dw, db, dout, inp, w, N, C, OC);
}
void embedding_forward(float* out, const int32_t* tok, const float* wte, const float* wpe,
                       int64_t B, int64_t T, int64_t C) {
  timed<&ops::Backend::embedding_forward>(Op::embedding_forward, d(B) * d(T) * d(C),
                                          F * 3 * d(B) * d(T) * d(C), out, tok, wte, wpe, B, T, C);
}
void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tok,
                        int64_t B, int64_t T, int64_t C) {
  timed<&ops::Backend::embedding_backward>(Op::embedding_backward, 2 * d(B) * d(T) * d(C),
                                           F * 5 * d(B) * d(T) * d(C), dwte, dwpe, dout, tok, B, T, C);
}
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w,
                       const float* b, int64_t N, int64_t C) {
  timed<&ops::Backend::layernorm_forward>(Op::layernorm_forward, 8 * d(N) * d(C),
                                          F * (2 * d(N) * d(C) + 2 * d(C) + 2 * d(N)), out, mean,
                                          rstd, inp, w, b, N, C);
}
void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp,
                        const float* w, const float* mean, const float* rstd, int64_t N, int64_t C) {
  timed<&ops::Backend::layernorm_backward>(Op::layernorm_backward, 14 * d(N) * d(C),
                                           F * (4 * d(N) * d(C) + 5 * d(C) + 2 * d(N)), dinp, dw,
                                           db, dout, inp, w, mean, rstd, N, C);
}
void gelu_forward(float* out, const float* inp, int64_t n) {
  timed<&ops::Backend::gelu_forward>(Op::gelu_forward, 12 * d(n), F * 2 * d(n), out, inp, n);
}
void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) {
  timed<&ops::Backend::gelu_backward>(Op::gelu_backward, 20 * d(n), F * 3 * d(n), dinp, inp, dout, n);
}
// Causal attention: QK^T and AV each 2*B*NH*T*T*HS = 2*B*T*T*C FLOPs, half of them masked.
void attention_forward(float* out, float* att, const float* qkv, int64_t B, int64_t T, int64_t C,
                       int64_t NH) {
  timed<&ops::Backend::attention_forward>(
      Op::attention_forward, 2 * d(B) * d(T) * d(T) * d(C),
      F * (4 * d(B) * d(T) * d(C) + d(B) * d(NH) * d(T) * d(T)), out, att, qkv, B, T, C, NH);
}
void attention_backward(float* dqkv, float* datt, const float* dout, const float* qkv,
                        const float* att, int64_t B, int64_t T, int64_t C, int64_t NH) {
  timed<&ops::Backend::attention_backward>(
      Op::attention_backward, 4 * d(B) * d(T) * d(T) * d(C),
      F * (7 * d(B) * d(T) * d(C) + 3 * d(B) * d(NH) * d(T) * d(T)), dqkv, datt, dout, qkv, att,
      B, T, C, NH);
}
void residual_forward(float* out, const float* a, const float* b, int64_t n) {
  timed<&ops::Backend::residual_forward>(Op::residual_forward, d(n), F * 3 * d(n), out, a, b, n);
}
void residual_backward(float* da, float* db, const float* dout, int64_t n) {
  timed<&ops::Backend::residual_backward>(Op::residual_backward, 2 * d(n), F * 5 * d(n), da, db,
                                          dout, n);
}
void softmax_xent_forward(float* losses, const float* logits, const int32_t* targets, int64_t N,
                          int64_t V) {
  timed<&ops::Backend::softmax_xent_forward>(Op::softmax_xent_forward, 4 * d(N) * d(V),
                                             F * d(N) * d(V), losses, logits, targets, N, V);
}
void softmax_xent_backward(float* dlogits, const float* logits, const int32_t* targets,
                           const float* dlosses, int64_t N, int64_t V) {
  timed<&ops::Backend::softmax_xent_backward>(Op::softmax_xent_backward, 5 * d(N) * d(V),
                                              F * 2 * d(N) * d(V), dlogits, logits, targets,
                                              dlosses, N, V);
}
void adamw_update(float* p, const float* g, float* m, float* v, int64_t n,
                  const ops::AdamWParams& hp) {
  timed<&ops::Backend::adamw_update>(Op::adamw_update, 16 * d(n), F * 7 * d(n), p, g, m, v, n, hp);
}

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* w, int64_t N,
                     int64_t C, float eps) {
  timed<&ops::Backend::rmsnorm_forward>(Op::rmsnorm_forward, 4 * d(N) * d(C),
                                        F * (2 * d(N) * d(C) + d(C) + d(N)), out, rstd, inp, w, N,
                                        C, eps);
}
void rmsnorm_backward(float* dinp, float* dw, const float* dout, const float* inp, const float* w,
                      const float* rstd, int64_t N, int64_t C) {
  timed<&ops::Backend::rmsnorm_backward>(Op::rmsnorm_backward, 10 * d(N) * d(C),
                                         F * (4 * d(N) * d(C) + 3 * d(C) + d(N)), dinp, dw, dout,
                                         inp, w, rstd, N, C);
}
// Rotary positions: 6 FLOPs per rotated pair; the Q and K heads read and written.
void rope_forward(float* out, const float* inp, const float* cos, const float* sin, int64_t N,
                  int64_t T, int64_t NH, int64_t NKV, int64_t HS) {
  timed<&ops::Backend::rope_forward>(Op::rope_forward, 3 * d(N) * d(NH + NKV) * d(HS),
                                     F * 2 * d(N) * d(NH + 2 * NKV) * d(HS), out, inp, cos, sin, N,
                                     T, NH, NKV, HS);
}
void rope_backward(float* dinp, const float* dout, const float* cos, const float* sin, int64_t N,
                   int64_t T, int64_t NH, int64_t NKV, int64_t HS) {
  timed<&ops::Backend::rope_backward>(Op::rope_backward, 3 * d(N) * d(NH + NKV) * d(HS),
                                      F * 2 * d(N) * d(NH + 2 * NKV) * d(HS), dinp, dout, cos, sin,
                                      N, T, NH, NKV, HS);
}
void swiglu_forward(float* out, const float* inp, int64_t N, int64_t Fh) {
  timed<&ops::Backend::swiglu_forward>(Op::swiglu_forward, 8 * d(N) * d(Fh), F * 3 * d(N) * d(Fh),
                                       out, inp, N, Fh);
}
void swiglu_backward(float* dinp, const float* inp, const float* dout, int64_t N, int64_t Fh) {
  timed<&ops::Backend::swiglu_backward>(Op::swiglu_backward, 14 * d(N) * d(Fh),
                                        F * 5 * d(N) * d(Fh), dinp, inp, dout, N, Fh);
}
void attention_gqa_forward(float* out, float* att, const float* qkv, int64_t B, int64_t T,
                           int64_t C, int64_t NH, int64_t NKV) {
  const double KC = d(C) / d(NH) * d(NKV);
  timed<&ops::Backend::attention_gqa_forward>(
      Op::attention_gqa_forward, 2 * d(B) * d(T) * d(T) * d(C),
      F * (d(B) * d(T) * (2 * d(C) + 2 * KC) + d(B) * d(NH) * d(T) * d(T)), out, att, qkv, B, T,
      C, NH, NKV);
}
void attention_gqa_backward(float* dqkv, float* datt, const float* dout, const float* qkv,
                            const float* att, int64_t B, int64_t T, int64_t C, int64_t NH,
                            int64_t NKV) {
  const double KC = d(C) / d(NH) * d(NKV);
  timed<&ops::Backend::attention_gqa_backward>(
      Op::attention_gqa_backward, 4 * d(B) * d(T) * d(T) * d(C),
      F * (d(B) * d(T) * (3 * d(C) + 4 * KC) + 3 * d(B) * d(NH) * d(T) * d(T)), dqkv, datt, dout,
      qkv, att, B, T, C, NH, NKV);
}

}  // namespace

ops::Backend profiled_host_backend(const ops::Backend& inner, OpProfiler* profiler) {
  if (!profiler) return inner;
  t_target = {&inner, profiler};
  return ops::Backend{inner.name,         matmul_forward,        matmul_backward,
                      embedding_forward,  embedding_backward,    layernorm_forward,
                      layernorm_backward, gelu_forward,          gelu_backward,
                      attention_forward,  attention_backward,    residual_forward,
                      residual_backward,  softmax_xent_forward,  softmax_xent_backward,
                      adamw_update,       rmsnorm_forward,       rmsnorm_backward,
                      rope_forward,       rope_backward,         swiglu_forward,
                      swiglu_backward,    attention_gqa_forward, attention_gqa_backward};
}

}  // namespace aiscale::profile
