// Causal multi-head attention on the CPU. One task per (batch, head); within it, plain
// vectorised loops over the head size and the keys. Only the causal half (t2 <= t) is
// computed, which at GPT shapes (T = 128..1024, HS = 64) makes these loops about as fast
// as calling sgemm on the full T x T square, without sgemm's per-call overhead or its
// threads fighting OpenMP's.
// GCC if-converts (and so vectorises) the branch-free selects of exp_approx only when
// it may assume that float operations do not trap; aiscale never enables FP traps.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif
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

// y += alpha * x
[[gnu::always_inline]] inline void axpy(float* y, float alpha, const float* x, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

// One (batch, head): qkv, out point at the head's first channel of token 0 of the batch
// row; att at this head's (T, T) block. Rows of qkv are 3C apart, rows of out C apart.
AISCALE_CPU_HOT void attention_forward_head(float* out, float* att, const float* qkv,
                                            int64_t T, int64_t C, int64_t HS) {
  const int64_t qkv_row = 3 * C;
  const float scale = 1.0f / std::sqrt(float(HS));
  for (int64_t t = 0; t < T; ++t) {
    const float* q = qkv + t * qkv_row;  // (HS)
    float* att_row = att + t * T;        // (T)
    float max_score = -std::numeric_limits<float>::infinity();
    for (int64_t t2 = 0; t2 <= t; ++t2) {
      const float score = dot(q, qkv + t2 * qkv_row + C, HS) * scale;
      att_row[t2] = score;
      max_score = score > max_score ? score : max_score;
    }
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t t2 = 0; t2 <= t; ++t2) {
      const float e = exp_approx(att_row[t2] - max_score);
      att_row[t2] = e;
      sum += e;
    }
    const float inv_sum = 1.0f / sum;
#pragma omp simd
    for (int64_t t2 = 0; t2 <= t; ++t2) att_row[t2] *= inv_sum;
    for (int64_t t2 = t + 1; t2 < T; ++t2) att_row[t2] = 0.0f;

    float* o = out + t * C;  // (HS)
    for (int64_t i = 0; i < HS; ++i) o[i] = 0.0f;
    for (int64_t t2 = 0; t2 <= t; ++t2) axpy(o, att_row[t2], qkv + t2 * qkv_row + 2 * C, HS);
  }
}

// One (batch, head) of the backward; dqkv's slices of this head are zeroed first, then
// accumulated over queries (dk, dv receive a term from every query t >= t2).
AISCALE_CPU_HOT void attention_backward_head(float* dqkv, float* datt, const float* dout,
                                             const float* qkv, const float* att, int64_t T,
                                             int64_t C, int64_t HS) {
  const int64_t qkv_row = 3 * C;
  const float scale = 1.0f / std::sqrt(float(HS));
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t part = 0; part < 3; ++part) {
      float* d = dqkv + t * qkv_row + part * C;
      for (int64_t i = 0; i < HS; ++i) d[i] = 0.0f;
    }
  }
  for (int64_t t = 0; t < T; ++t) {
    const float* att_row = att + t * T;  // (T)
    float* datt_row = datt + t * T;      // (T)
    const float* dout_t = dout + t * C;  // (HS)
    const float* q = qkv + t * qkv_row;  // (HS)
    float* dq = dqkv + t * qkv_row;      // (HS)
    // out = att @ v: datt = dout . v, dv += att * dout
    for (int64_t t2 = 0; t2 <= t; ++t2) {
      datt_row[t2] = dot(dout_t, qkv + t2 * qkv_row + 2 * C, HS);
      axpy(dqkv + t2 * qkv_row + 2 * C, att_row[t2], dout_t, HS);
    }
    // softmax: dscore = att * (datt - sum_j att_j datt_j), times the score scale
    float weighted = 0.0f;
#pragma omp simd reduction(+ : weighted)
    for (int64_t t2 = 0; t2 <= t; ++t2) weighted += att_row[t2] * datt_row[t2];
#pragma omp simd
    for (int64_t t2 = 0; t2 <= t; ++t2) {
      datt_row[t2] = scale * att_row[t2] * (datt_row[t2] - weighted);
    }
    // score = q . k: dq += dscore * k, dk += dscore * q
    for (int64_t t2 = 0; t2 <= t; ++t2) {
      axpy(dq, datt_row[t2], qkv + t2 * qkv_row + C, HS);
      axpy(dqkv + t2 * qkv_row + C, datt_row[t2], q, HS);
    }
  }
}

}  // namespace

void attention_forward(float* out, float* att, const float* qkv, int64_t B, int64_t T,
                       int64_t C, int64_t NH) {
  // out (B, T, C), att (B, NH, T, T), qkv (B, T, 3C)
  AISCALE_CHECK(NH > 0 && C % NH == 0, "attention: C = {} is not a multiple of NH = {}", C, NH);
  const int64_t HS = C / NH;
#pragma omp parallel for schedule(static) if (worth_threads(B * NH, T * T * HS))
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
#pragma omp parallel for schedule(static) if (worth_threads(B * NH, 2 * T * T * HS))
  for (int64_t bh = 0; bh < B * NH; ++bh) {
    const int64_t b = bh / NH, h = bh % NH;
    attention_backward_head(dqkv + b * T * 3 * C + h * HS, datt + bh * T * T,
                            dout + b * T * C + h * HS, qkv + b * T * 3 * C + h * HS,
                            att + bh * T * T, T, C, HS);
  }
}

}  // namespace aiscale::ops::cpu
