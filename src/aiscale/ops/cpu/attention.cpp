// Causal multi-head attention on the CPU. One task per (batch, head), dealt out over
// the OpenMP threads; within it, vectorised loops over the head size and the keys,
// computing only the causal half (t2 <= t). Measured on one core (EPYC, AVX2) at
// B=8 T=128 C=256 NH=4: forward 4.3 ms against 2.8 ms for the two sgemm calls per
// head on the full T x T square (softmax not included); sgemm would be faster alone,
// but called inside the OpenMP loop its own threads would oversubscribe the cores,
// and called outside it each small product would be split over threads on its own
// (not measured here). Attention is ~3% of the target model's step, so these simple
// loops, parallel over (batch, head) with no races, are kept.
// GCC if-converts (and so vectorises) the branch-free selects of exp_nonpositive only
// when it may assume that float operations do not trap; aiscale never enables FP traps.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif
#include <algorithm>
#include <cmath>
#include <limits>

#include "aiscale/core/error.h"
#include "aiscale/ops/cpu/kernels.h"
#include "aiscale/ops/cpu/simd.h"

namespace aiscale::ops::cpu {
namespace {

[[gnu::always_inline]] inline float dot(const float* a, const float* b, int64_t n) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

// out[j] = a . b_j for four rows b_j at once: four independent accumulators keep the
// FMA units busy (a single dot is one long dependency chain), and a is loaded once.
[[gnu::always_inline]] inline void dot4(float* out, const float* a, const float* b0,
                                        const float* b1, const float* b2, const float* b3,
                                        int64_t n) {
  float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
#pragma omp simd reduction(+ : s0, s1, s2, s3)
  for (int64_t i = 0; i < n; ++i) {
    s0 += a[i] * b0[i];
    s1 += a[i] * b1[i];
    s2 += a[i] * b2[i];
    s3 += a[i] * b3[i];
  }
  out[0] = s0, out[1] = s1, out[2] = s2, out[3] = s3;
}

// out[t2] = a . rows[t2] for t2 in [0, count), rows `stride` floats apart.
[[gnu::always_inline]] inline void dots(float* out, const float* a, const float* rows,
                                        int64_t stride, int64_t count, int64_t n) {
  int64_t j = 0;
  for (; j + 4 <= count; j += 4) {
    const float* r = rows + j * stride;
    dot4(out + j, a, r, r + stride, r + 2 * stride, r + 3 * stride, n);
  }
  for (; j < count; ++j) out[j] = dot(a, rows + j * stride, n);
}

// y += alpha * x
[[gnu::always_inline]] inline void axpy(float* y, float alpha, const float* x, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

// The head size is a compile-time constant for the common sizes (kHS > 0), so the
// loops over it unroll and the accumulators of a row stay in registers; kHS = 0 is the
// general path (hs at run time, accumulating in the destination).

// One (batch, head): qkv, out point at the head's first channel of token 0 of the batch
// row; att at this head's (T, T) block. Rows of qkv are 3C apart, rows of out C apart.
template <int64_t kHS>
[[gnu::always_inline]] inline void forward_head(float* out, float* att, const float* qkv,
                                                int64_t T, int64_t C, int64_t hs) {
  const int64_t HS = kHS > 0 ? kHS : hs;
  const int64_t qkv_row = 3 * C;
  const float scale = 1.0f / std::sqrt(float(HS));
  for (int64_t t = 0; t < T; ++t) {
    const float* q = qkv + t * qkv_row;  // (HS)
    float* att_row = att + t * T;        // (T)
    // scores of the keys t2 <= t, softmax over them, zeros above the diagonal
    dots(att_row, q, qkv + C, qkv_row, t + 1, HS);
    float max_score = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : max_score)
    for (int64_t t2 = 0; t2 <= t; ++t2) {
      att_row[t2] *= scale;
      max_score = att_row[t2] > max_score ? att_row[t2] : max_score;
    }
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t t2 = 0; t2 <= t; ++t2) {
      const float e = exp_nonpositive(att_row[t2] - max_score);
      att_row[t2] = e;
      sum += e;
    }
    const float inv_sum = 1.0f / sum;
#pragma omp simd
    for (int64_t t2 = 0; t2 <= t; ++t2) att_row[t2] *= inv_sum;
    for (int64_t t2 = t + 1; t2 < T; ++t2) att_row[t2] = 0.0f;
    // out_t = sum over t2 of att[t, t2] v_t2
    float local[kHS > 0 ? kHS : 1];
    float* acc = kHS > 0 ? local : out + t * C;
    for (int64_t i = 0; i < HS; ++i) acc[i] = 0.0f;
    for (int64_t t2 = 0; t2 <= t; ++t2) axpy(acc, att_row[t2], qkv + t2 * qkv_row + 2 * C, HS);
    if (kHS > 0) std::copy(acc, acc + HS, out + t * C);
  }
}

// One (batch, head) of the backward, in two sweeps so that every gradient row is
// written once (dqkv is overwritten, never zeroed first):
//   by query t:  datt = dout_t . v, dscore = scale att (datt - sum att datt) (kept in
//                datt), dq_t = sum over t2 <= t of dscore[t, t2] k_t2
//   by key t2:   dv_t2 = sum over t >= t2 of att[t, t2] dout_t,
//                dk_t2 = sum over t >= t2 of dscore[t, t2] q_t
template <int64_t kHS>
[[gnu::always_inline]] inline void backward_head(float* dqkv, float* datt, const float* dout,
                                                 const float* qkv, const float* att, int64_t T,
                                                 int64_t C, int64_t hs) {
  const int64_t HS = kHS > 0 ? kHS : hs;
  const int64_t qkv_row = 3 * C;
  const float scale = 1.0f / std::sqrt(float(HS));
  float local_a[kHS > 0 ? kHS : 1], local_b[kHS > 0 ? kHS : 1];
  for (int64_t t = 0; t < T; ++t) {
    const float* att_row = att + t * T;  // (T)
    float* datt_row = datt + t * T;      // (T)
    const float* dout_t = dout + t * C;  // (HS)
    dots(datt_row, dout_t, qkv + 2 * C, qkv_row, t + 1, HS);
    float weighted = 0.0f;
#pragma omp simd reduction(+ : weighted)
    for (int64_t t2 = 0; t2 <= t; ++t2) weighted += att_row[t2] * datt_row[t2];
#pragma omp simd
    for (int64_t t2 = 0; t2 <= t; ++t2) {
      datt_row[t2] = scale * att_row[t2] * (datt_row[t2] - weighted);
    }
    float* dq = kHS > 0 ? local_a : dqkv + t * qkv_row;
    for (int64_t i = 0; i < HS; ++i) dq[i] = 0.0f;
    for (int64_t t2 = 0; t2 <= t; ++t2) axpy(dq, datt_row[t2], qkv + t2 * qkv_row + C, HS);
    if (kHS > 0) std::copy(dq, dq + HS, dqkv + t * qkv_row);
  }
  for (int64_t t2 = 0; t2 < T; ++t2) {
    float* dk = kHS > 0 ? local_a : dqkv + t2 * qkv_row + C;
    float* dv = kHS > 0 ? local_b : dqkv + t2 * qkv_row + 2 * C;
    for (int64_t i = 0; i < HS; ++i) dk[i] = 0.0f, dv[i] = 0.0f;
    for (int64_t t = t2; t < T; ++t) {
      axpy(dv, att[t * T + t2], dout + t * C, HS);
      axpy(dk, datt[t * T + t2], qkv + t * qkv_row, HS);
    }
    if (kHS > 0) {
      std::copy(dk, dk + HS, dqkv + t2 * qkv_row + C);
      std::copy(dv, dv + HS, dqkv + t2 * qkv_row + 2 * C);
    }
  }
}

AISCALE_CPU_HOT void attention_forward_head(float* out, float* att, const float* qkv,
                                            int64_t T, int64_t C, int64_t HS) {
  switch (HS) {
    case 32: return forward_head<32>(out, att, qkv, T, C, HS);
    case 64: return forward_head<64>(out, att, qkv, T, C, HS);
    case 128: return forward_head<128>(out, att, qkv, T, C, HS);
    default: return forward_head<0>(out, att, qkv, T, C, HS);
  }
}

AISCALE_CPU_HOT void attention_backward_head(float* dqkv, float* datt, const float* dout,
                                             const float* qkv, const float* att, int64_t T,
                                             int64_t C, int64_t HS) {
  switch (HS) {
    case 32: return backward_head<32>(dqkv, datt, dout, qkv, att, T, C, HS);
    case 64: return backward_head<64>(dqkv, datt, dout, qkv, att, T, C, HS);
    case 128: return backward_head<128>(dqkv, datt, dout, qkv, att, T, C, HS);
    default: return backward_head<0>(dqkv, datt, dout, qkv, att, T, C, HS);
  }
}

}  // namespace

void attention_forward(float* out, float* att, const float* qkv, int64_t B, int64_t T,
                       int64_t C, int64_t NH) {
  // out (B, T, C), att (B, NH, T, T), qkv (B, T, 3C)
  AISCALE_CHECK(NH > 0 && C % NH == 0, "attention: C = {} is not a multiple of NH = {}", C, NH);
  const int64_t HS = C / NH;
#pragma omp parallel for schedule(dynamic, dynamic_chunk(B * NH)) \
    if (worth_threads(B * NH, T * T * HS))
  for (int64_t bh = 0; bh < B * NH; ++bh) {
    const int64_t b = bh / NH, h = bh % NH;
    attention_forward_head(out + b * T * C + h * HS, att + bh * T * T,
                           qkv + b * T * 3 * C + h * HS, T, C, HS);
  }
}

void attention_backward(float* dqkv, float* datt, const float* dout, const float* qkv,
                        const float* att, int64_t B, int64_t T, int64_t C, int64_t NH) {
  // dqkv (B, T, 3C) overwritten, datt (B, NH, T, T) scratch, dout (B, T, C),
  // qkv (B, T, 3C), att (B, NH, T, T)
  AISCALE_CHECK(NH > 0 && C % NH == 0, "attention: C = {} is not a multiple of NH = {}", C, NH);
  const int64_t HS = C / NH;
#pragma omp parallel for schedule(dynamic, dynamic_chunk(B * NH)) \
    if (worth_threads(B * NH, 2 * T * T * HS))
  for (int64_t bh = 0; bh < B * NH; ++bh) {
    const int64_t b = bh / NH, h = bh % NH;
    attention_backward_head(dqkv + b * T * 3 * C + h * HS, datt + bh * T * T,
                            dout + b * T * C + h * HS, qkv + b * T * 3 * C + h * HS,
                            att + bh * T * T, T, C, HS);
  }
}

}  // namespace aiscale::ops::cpu
