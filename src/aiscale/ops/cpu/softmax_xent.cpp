// Softmax cross-entropy on the CPU, one row per task. This runs on (B*T, V) logits with
// V = 50257 every step (200 MB), so each row streams from memory once and exp (the
// vectorised exp_nonpositive) runs once per element. A row is taken in blocks small
// enough to stay in L1 between the two loops over them (max, then exp), the running sum
// rescaled when a block raises the maximum ("online" softmax):
//   forward:  per block: max, sum of exp(x - running max)         -> loss
//   backward: per block: max m_b, write e = exp(x - m_b), sum      (the only exp)
//             then per block: scale by dloss * exp(m_b - max) / sum (in L2: 200 KB row)
// GCC if-converts (and so vectorises) the branch-free selects of exp_nonpositive only
// when it may assume that float operations do not trap; aiscale never enables FP traps.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif
#include <algorithm>
#include <cmath>
#include <limits>

#include "aiscale/ops/cpu/kernels.h"
#include "aiscale/ops/cpu/simd.h"

namespace aiscale::ops::cpu {
namespace {

// Blocks of at least 1024 floats (4 KB), and at most kMaxBlocks of them per row.
constexpr int64_t kMinBlock = 1024;
constexpr int64_t kMaxBlocks = 256;

int64_t block_size(int64_t V) {
  const int64_t block = std::max(kMinBlock, (V + kMaxBlocks - 1) / kMaxBlocks);
  return (block + 15) / 16 * 16;
}

[[gnu::always_inline]] inline float block_max(const float* x, int64_t n) {
  float m = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : m)
  for (int64_t j = 0; j < n; ++j) m = x[j] > m ? x[j] : m;
  return m;
}

AISCALE_CPU_HOT float row_loss(const float* row, int32_t target, int64_t V) {
  const int64_t block = block_size(V);
  float max_logit = -std::numeric_limits<float>::infinity();
  float sum = 0.0f;  // of exp(x - max_logit)
  for (int64_t begin = 0; begin < V; begin += block) {
    const float* x = row + begin;
    const int64_t n = std::min(block, V - begin);
    const float m = block_max(x, n);
    if (m > max_logit) {
      sum *= exp_nonpositive(max_logit - m);  // 0 on the first block (exp(-inf))
      max_logit = m;
    }
    float block_sum = 0.0f;
#pragma omp simd reduction(+ : block_sum)
    for (int64_t j = 0; j < n; ++j) block_sum += exp_nonpositive(x[j] - max_logit);
    sum += block_sum;
  }
  // -log(exp(x_target - max) / sum)
  return std::log(sum) - (row[target] - max_logit);
}

// drow may be row itself: element j is read before element j is written, and never after.
AISCALE_CPU_HOT void row_grad(float* drow, const float* row, int32_t target, float dloss,
                              int64_t V) {
  const int64_t block = block_size(V);
  float block_maxima[kMaxBlocks];
  float max_logit = -std::numeric_limits<float>::infinity();
  float sum = 0.0f;  // of exp(x - max_logit)
  for (int64_t begin = 0, b = 0; begin < V; begin += block, ++b) {
    const float* x = row + begin;
    float* e = drow + begin;
    const int64_t n = std::min(block, V - begin);
    const float m = block_max(x, n);
    const float block_sum = exp_shifted(e, x, n, m);
    block_maxima[b] = m;
    if (m > max_logit) {
      sum = sum * exp_nonpositive(max_logit - m) + block_sum;
      max_logit = m;
    } else {
      sum += block_sum * exp_nonpositive(m - max_logit);
    }
  }
  const float scale = dloss / sum;
  for (int64_t begin = 0, b = 0; begin < V; begin += block, ++b) {
    float* e = drow + begin;
    const int64_t n = std::min(block, V - begin);
    const float f = scale * exp_nonpositive(block_maxima[b] - max_logit);
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) e[j] *= f;
  }
  drow[target] -= dloss;
}

}  // namespace

void softmax_xent_forward(float* losses, const float* logits, const int32_t* targets,
                          int64_t N, int64_t V) {
  // losses (N), logits (N, V), targets (N)
#pragma omp parallel for schedule(dynamic, dynamic_chunk(N)) \
    if (worth_threads(N, V))
  for (int64_t n = 0; n < N; ++n) losses[n] = row_loss(logits + n * V, targets[n], V);
}

void softmax_xent_backward(float* dlogits, const float* logits, const int32_t* targets,
                           const float* dlosses, int64_t N, int64_t V) {
  // dlogits (N, V) overwritten, may alias logits (N, V); targets (N), dlosses (N)
#pragma omp parallel for schedule(dynamic, dynamic_chunk(N)) \
    if (worth_threads(N, V))
  for (int64_t n = 0; n < N; ++n) {
    row_grad(dlogits + n * V, logits + n * V, targets[n], dlosses[n], V);
  }
}

}  // namespace aiscale::ops::cpu
