// GCC if-converts (and so vectorises) the branch-free selects of exp_nonpositive only
// when it may assume that float operations do not trap; aiscale never enables FP traps.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif
#include "aiscale/nn/models/gpt_decoder_cpu_kernels.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "aiscale/ops/cpu/simd.h"

namespace aiscale::nn {
namespace {

// One (row, head): the softmax of the scaled scores, then the weighted sum of the values,
// in the order of the training op so that both agree to the last bits on the same inputs.
AISCALE_CPU_HOT void attend(float* out, float* scores, const float* q, const float* k,
                            const float* v, int64_t n, int64_t stride, int64_t HS) {
  const float scale = 1.0f / std::sqrt(float(HS));
  ops::cpu::dots(scores, q, k, stride, n, HS);  // scores[t] = q . k_t for t < n
  ops::cpu::scaled_softmax(scores, n, scale);
  for (int64_t i = 0; i < HS; ++i) out[i] = 0.0f;
  for (int64_t t = 0; t < n; ++t) {
    const float a = scores[t];
    const float* vt = v + t * stride;
#pragma omp simd
    for (int64_t i = 0; i < HS; ++i) out[i] += a * vt[i];
  }
}

// out[r * OC + o] = b[o] + w_o . in_r for the weight rows o in [begin, end): four weight
// rows at a time against each input row, so an input load feeds four accumulators and the
// four rows stay in L1 while every input row passes.
AISCALE_CPU_HOT void linear_columns(float* out, const float* in, const float* w, const float* b,
                                    int64_t R, int64_t C, int64_t OC, int64_t begin, int64_t end) {
  int64_t o = begin;
  for (; o + 4 <= end; o += 4) {
    const float *w0 = w + o * C, *w1 = w0 + C, *w2 = w1 + C, *w3 = w2 + C;
    for (int64_t r = 0; r < R; ++r) {
      float s[4];
      ops::cpu::dot4(s, in + r * C, w0, w1, w2, w3, C);
      float* y = out + r * OC + o;
      y[0] = s[0] + (b ? b[o] : 0.0f);
      y[1] = s[1] + (b ? b[o + 1] : 0.0f);
      y[2] = s[2] + (b ? b[o + 2] : 0.0f);
      y[3] = s[3] + (b ? b[o + 3] : 0.0f);
    }
  }
  for (; o < end; ++o) {
    const float* wo = w + o * C;
    for (int64_t r = 0; r < R; ++r) {
      out[r * OC + o] = ops::cpu::dot(in + r * C, wo, C) + (b ? b[o] : 0.0f);
    }
  }
}

}  // namespace

void few_rows_linear(float* out, const float* in, const float* w, const float* b, int64_t R,
                     int64_t C, int64_t OC) {
  // Chunks of 64 columns (a multiple of four), dealt out dynamically: on a shared machine a
  // paused thread's share is taken by the others.
  constexpr int64_t kChunk = 64;
  const int64_t chunks = (OC + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(dynamic, 1) if (ops::cpu::worth_threads(chunks, R * C * kChunk))
  for (int64_t i = 0; i < chunks; ++i)
    linear_columns(out, in, w, b, R, C, OC, i * kChunk, std::min(OC, (i + 1) * kChunk));
}

void cached_attention_forward(float* out, const float* qkv, int64_t qkv_stride,
                              const CachedRow* rows, int64_t R, int64_t stride, int64_t C,
                              int64_t NH, int64_t NKV, float* scratch, int64_t max_n,
                              int threads) {
  const int64_t HS = C / NH, group = NH / NKV;
  int64_t work = 0;
  for (int64_t r = 0; r < R; ++r) work += rows[r].n * 2 * C;
  // One task per (row, head); a decoding step of one stream is a dozen small tasks, worth
  // threads only once the windows are long.
  const bool parallel = threads > 1 && R * NH > 1 && work >= ops::cpu::kParallelMinWork;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads) if (parallel)
  for (int64_t rh = 0; rh < R * NH; ++rh) {
    const int64_t r = rh / NH, h = rh % NH, kv = h / group;
    float* scores = scratch + int64_t(omp_get_thread_num()) * max_n;
    attend(out + r * C + h * HS, scores, qkv + r * qkv_stride + h * HS, rows[r].k + kv * HS,
           rows[r].v + kv * HS, rows[r].n, stride, HS);
  }
}

}  // namespace aiscale::nn
