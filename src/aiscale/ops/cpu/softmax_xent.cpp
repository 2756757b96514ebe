// Softmax cross-entropy on the CPU, one row per task. This runs on (B*T, V) logits with
// V = 50257 every step, so each row is read as few times as possible and exp is the
// vectorised exp_approx:
//   forward:  pass 1 max, pass 2 sum of exp(x - max)                   (1 exp/element)
//   backward: pass 1 max, pass 2 e = exp(x - max) written out, summed,
//             pass 3 scale by dloss / sum                              (1 exp/element)
// A 50257-float row is 200 KB, so passes 2 and 3 find it in L2.
// GCC if-converts (and so vectorises) the branch-free selects of exp_approx only when
// it may assume that float operations do not trap; aiscale never enables FP traps.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif
#include <cmath>
#include <limits>

#include "aiscale/ops/cpu/kernels.h"
#include "aiscale/ops/cpu/simd.h"

namespace aiscale::ops::cpu {
namespace {

[[gnu::always_inline]] inline float row_max(const float* row, int64_t V) {
  float m = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : m)
  for (int64_t j = 0; j < V; ++j) m = row[j] > m ? row[j] : m;
  return m;
}

AISCALE_CPU_HOT float row_loss(const float* row, int32_t target, int64_t V) {
  const float m = row_max(row, V);
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < V; ++j) sum += exp_approx(row[j] - m);
  // -log(exp(x_target - max) / sum)
  return std::log(sum) - (row[target] - m);
}

// drow may be row itself: passes 2 and 3 read element j before writing element j only.
AISCALE_CPU_HOT void row_grad(float* drow, const float* row, int32_t target, float dloss,
                              int64_t V) {
  const float m = row_max(row, V);
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < V; ++j) {
    const float e = exp_approx(row[j] - m);
    drow[j] = e;
    sum += e;
  }
  const float scale = dloss / sum;
#pragma omp simd
  for (int64_t j = 0; j < V; ++j) drow[j] *= scale;
  drow[target] -= dloss;
}

}  // namespace

void softmax_xent_forward(float* losses, const float* logits, const int32_t* targets,
                          int64_t N, int64_t V) {
  // losses (N), logits (N, V), targets (N)
#pragma omp parallel for schedule(static) if (worth_threads(N, 8 * V))
  for (int64_t n = 0; n < N; ++n) losses[n] = row_loss(logits + n * V, targets[n], V);
}

void softmax_xent_backward(float* dlogits, const float* logits, const int32_t* targets,
                           const float* dlosses, int64_t N, int64_t V) {
  // dlogits (N, V) overwritten, may alias logits (N, V); targets (N), dlosses (N)
#pragma omp parallel for schedule(static) if (worth_threads(N, 8 * V))
  for (int64_t n = 0; n < N; ++n) {
    row_grad(dlogits + n * V, logits + n * V, targets[n], dlosses[n], V);
  }
}

}  // namespace aiscale::ops::cpu
