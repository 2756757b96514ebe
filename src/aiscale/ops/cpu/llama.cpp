// The llama family's row-wise ops on the CPU: RMSNorm, rotary positions and SwiGLU,
// parallel over rows (or chunks of values), vectorised within a row.
// GCC if-converts (and so vectorises) the branch-free selects of exp_nonpositive only
// when it may assume that float operations do not trap; aiscale never enables FP traps.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif
#include <cmath>
#include <cstring>

#include "aiscale/core/error.h"
#include "aiscale/ops/cpu/kernels.h"
#include "aiscale/ops/cpu/simd.h"

namespace aiscale::ops::cpu {
namespace {

AISCALE_CPU_HOT void rmsnorm_row(float* out, float* rstd, const float* x, const float* w,
                                 int64_t C, float eps) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t c = 0; c < C; ++c) sum += x[c] * x[c];
  const float r = 1.0f / std::sqrt(sum / float(C) + eps);
#pragma omp simd
  for (int64_t c = 0; c < C; ++c) out[c] = x[c] * r * w[c];
  *rstd = r;
}

AISCALE_CPU_HOT void rmsnorm_backward_row(float* dx, const float* dy, const float* x,
                                          const float* w, float r, int64_t C) {
  float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
  for (int64_t c = 0; c < C; ++c) dot += w[c] * dy[c] * x[c];
  const float k = r * r * r * dot / float(C);
#pragma omp simd
  for (int64_t c = 0; c < C; ++c) dx[c] += r * w[c] * dy[c] - k * x[c];
}

// dweight[c] += sum over rows of dy x r, for the channels [begin, end).
AISCALE_CPU_HOT void rmsnorm_weight_grads(float* dweight, const float* dout, const float* inp,
                                          const float* rstd, int64_t N, int64_t C, int64_t begin,
                                          int64_t end) {
  for (int64_t n = 0; n < N; ++n) {
    const float* x = inp + n * C;
    const float* dy = dout + n * C;
    const float r = rstd[n];
#pragma omp simd
    for (int64_t c = begin; c < end; ++c) dweight[c] += dy[c] * x[c] * r;
  }
}

// One row's Q and K heads rotated (sign +1) or rotated back (-1); V copied when distinct.
AISCALE_CPU_HOT void rope_row(float* y, const float* x, const float* cos, const float* sin,
                              int64_t heads, int64_t width, int64_t HS, float sign) {
  const int64_t half = HS / 2;
  for (int64_t h = 0; h < heads; ++h) {
    const float* a = x + h * HS;
    float* b = y + h * HS;
#pragma omp simd
    for (int64_t i = 0; i < half; ++i) {
      const float c = cos[i], s = sign * sin[i];
      const float x0 = a[i], x1 = a[i + half];
      b[i] = x0 * c - x1 * s;
      b[i + half] = x1 * c + x0 * s;
    }
  }
  if (y != x) std::memcpy(y + heads * HS, x + heads * HS, size_t(width - heads * HS) * 4);
}

void rope_apply(float* out, const float* inp, const float* cos, const float* sin, int64_t N,
                int64_t T, int64_t NH, int64_t NKV, int64_t HS, float sign) {
  AISCALE_CHECK(HS % 2 == 0, "rotary positions need an even head size, not {}", HS);
  const int64_t W = (NH + 2 * NKV) * HS, half = HS / 2;
#pragma omp parallel for schedule(dynamic, dynamic_chunk(N)) if (worth_threads(N, W))
  for (int64_t n = 0; n < N; ++n) {
    const int64_t pos = n % T;
    rope_row(out + n * W, inp + n * W, cos + pos * half, sin + pos * half, NH + NKV, W, HS, sign);
  }
}

// sigmoid(g) from e = exp(-|g|) <= 1, exact on both sides (as elementwise.cpp's GELU).
[[gnu::always_inline]] inline float sigmoid(float g) {
  const float e = exp_nonpositive(-std::fabs(g));
  const float r = 1.0f / (1.0f + e);
  return g >= 0.0f ? r : e * r;
}

AISCALE_CPU_HOT void swiglu_row(float* out, const float* gate, const float* up, int64_t F) {
#pragma omp simd
  for (int64_t f = 0; f < F; ++f) out[f] = gate[f] * sigmoid(gate[f]) * up[f];
}

AISCALE_CPU_HOT void swiglu_backward_row(float* dgate, float* dup, const float* gate,
                                         const float* up, const float* dy, int64_t F) {
#pragma omp simd
  for (int64_t f = 0; f < F; ++f) {
    const float g = gate[f], s = sigmoid(g);
    dgate[f] = dy[f] * up[f] * s * (1.0f + g * (1.0f - s));
    dup[f] = dy[f] * g * s;
  }
}

}  // namespace

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int64_t N,
                     int64_t C, float eps) {
  // out (N, C), rstd (N), inp (N, C), weight (C)
#pragma omp parallel for schedule(dynamic, dynamic_chunk(N)) if (worth_threads(N, C))
  for (int64_t n = 0; n < N; ++n) rmsnorm_row(out + n * C, rstd + n, inp + n * C, weight, C, eps);
}

void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                      const float* weight, const float* rstd, int64_t N, int64_t C) {
  // dinp (N, C) accumulates, dweight (C) +=
#pragma omp parallel for schedule(dynamic, dynamic_chunk(N)) if (worth_threads(N, C))
  for (int64_t n = 0; n < N; ++n)
    rmsnorm_backward_row(dinp + n * C, dout + n * C, inp + n * C, weight, rstd[n], C);
  parallel_slices(C, N, [&](int64_t begin, int64_t end) {
    rmsnorm_weight_grads(dweight, dout, inp, rstd, N, C, begin, end);
  });
}

void rope_forward(float* out, const float* inp, const float* cos, const float* sin, int64_t N,
                  int64_t T, int64_t NH, int64_t NKV, int64_t HS) {
  rope_apply(out, inp, cos, sin, N, T, NH, NKV, HS, 1.0f);
}

// The rotation is orthogonal: its gradient is the rotation by the opposite angle.
void rope_backward(float* dinp, const float* dout, const float* cos, const float* sin, int64_t N,
                   int64_t T, int64_t NH, int64_t NKV, int64_t HS) {
  rope_apply(dinp, dout, cos, sin, N, T, NH, NKV, HS, -1.0f);
}

void swiglu_forward(float* out, const float* inp, int64_t N, int64_t F) {
  // out (N, F), inp (N, 2F): gate then up
#pragma omp parallel for schedule(dynamic, dynamic_chunk(N)) if (worth_threads(N, F))
  for (int64_t n = 0; n < N; ++n) swiglu_row(out + n * F, inp + n * 2 * F, inp + n * 2 * F + F, F);
}

void swiglu_backward(float* dinp, const float* inp, const float* dout, int64_t N, int64_t F) {
  // dinp (N, 2F) overwritten
#pragma omp parallel for schedule(dynamic, dynamic_chunk(N)) if (worth_threads(N, 4 * F))
  for (int64_t n = 0; n < N; ++n)
    swiglu_backward_row(dinp + n * 2 * F, dinp + n * 2 * F + F, inp + n * 2 * F,
                        inp + n * 2 * F + F, dout + n * F, F);
}

}  // namespace aiscale::ops::cpu
