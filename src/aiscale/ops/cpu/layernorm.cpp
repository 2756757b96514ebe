// LayerNorm on the CPU: one row per task for the forward and for dinp; the weight and
// bias gradients are split by channel slices (each thread owns its slice and sums the
// rows in order), so nothing races and results do not depend on the thread count.
#include <cmath>

#include "aiscale/ops/cpu/kernels.h"
#include "aiscale/ops/cpu/simd.h"

namespace aiscale::ops::cpu {
namespace {

constexpr float kLayerNormEps = 1e-5f;

AISCALE_CPU_HOT void layernorm_row(float* out, float* mean, float* rstd, const float* x,
                                   const float* weight, const float* bias, int64_t C) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t c = 0; c < C; ++c) sum += x[c];
  const float m = sum / float(C);
  float sum_sq = 0.0f;  // two passes: no cancellation as in E[x^2] - E[x]^2
#pragma omp simd reduction(+ : sum_sq)
  for (int64_t c = 0; c < C; ++c) sum_sq += (x[c] - m) * (x[c] - m);
  const float s = 1.0f / std::sqrt(sum_sq / float(C) + kLayerNormEps);
#pragma omp simd
  for (int64_t c = 0; c < C; ++c) out[c] = (x[c] - m) * s * weight[c] + bias[c];
  *mean = m;
  *rstd = s;
}

AISCALE_CPU_HOT void layernorm_backward_row(float* dinp, const float* dy, const float* x,
                                            const float* weight, float mean, float rstd,
                                            int64_t C) {
  float dnorm_sum = 0.0f, dnorm_norm_sum = 0.0f;
#pragma omp simd reduction(+ : dnorm_sum, dnorm_norm_sum)
  for (int64_t c = 0; c < C; ++c) {
    const float norm = (x[c] - mean) * rstd;
    const float dnorm = dy[c] * weight[c];
    dnorm_sum += dnorm;
    dnorm_norm_sum += dnorm * norm;
  }
  const float dnorm_mean = dnorm_sum / float(C);
  const float dnorm_norm_mean = dnorm_norm_sum / float(C);
#pragma omp simd
  for (int64_t c = 0; c < C; ++c) {
    const float norm = (x[c] - mean) * rstd;
    const float dnorm = dy[c] * weight[c];
    dinp[c] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * rstd;
  }
}

// dweight[c] += sum_n norm[n, c] dy[n, c], dbias[c] += sum_n dy[n, c], c in [begin, end).
AISCALE_CPU_HOT void layernorm_param_grads(float* dweight, float* dbias, const float* dout,
                                           const float* inp, const float* mean,
                                           const float* rstd, int64_t N, int64_t C,
                                           int64_t begin, int64_t end) {
  for (int64_t n = 0; n < N; ++n) {
    const float* dy = dout + n * C;
    const float* x = inp + n * C;
    const float m = mean[n], s = rstd[n];
#pragma omp simd
    for (int64_t c = begin; c < end; ++c) {
      dweight[c] += (x[c] - m) * s * dy[c];
      dbias[c] += dy[c];
    }
  }
}

}  // namespace

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                       const float* weight, const float* bias, int64_t N, int64_t C) {
  // out (N, C), mean (N), rstd (N), inp (N, C), weight (C), bias (C)
#pragma omp parallel for schedule(dynamic, dynamic_chunk(N)) \
    if (worth_threads(N, C))
  for (int64_t n = 0; n < N; ++n) {
    layernorm_row(out + n * C, mean + n, rstd + n, inp + n * C, weight, bias, C);
  }
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean,
                        const float* rstd, int64_t N, int64_t C) {
  // dinp (N, C) accumulates, dweight (C) +=, dbias (C) +=, dout (N, C), inp (N, C),
  // weight (C), mean (N), rstd (N)
#pragma omp parallel for schedule(dynamic, dynamic_chunk(N)) \
    if (worth_threads(N, C))
  for (int64_t n = 0; n < N; ++n) {
    layernorm_backward_row(dinp + n * C, dout + n * C, inp + n * C, weight, mean[n], rstd[n], C);
  }
  parallel_slices(C, N, [&](int64_t begin, int64_t end) {
    layernorm_param_grads(dweight, dbias, dout, inp, mean, rstd, N, C, begin, end);
  });
}

}  // namespace aiscale::ops::cpu
