// Elementwise ops on the CPU: GELU and the residual add, in chunks over the threads.
// GCC if-converts (and so vectorises) the branch-free selects of exp_nonpositive only
// when it may assume that float operations do not trap; aiscale never enables FP traps.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif
#include <cmath>

#include "aiscale/ops/cpu/kernels.h"
#include "aiscale/ops/cpu/simd.h"

namespace aiscale::ops::cpu {
namespace {

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluCubic = 0.044715f;

// GELU(x) = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3), computed as
// x * sigmoid(2u): the same function, since 0.5 (1 + tanh u) = 1 / (1 + exp(-2u)), with
// one exp instead of a tanh and without the cancellation of 1 + tanh(u) for negative x.
// The sigmoid and its complement come from e = exp(-|z|) <= 1, exactly, both sides:
//   z >= 0: s = 1 / (1 + e), 1 - s = e / (1 + e);   z < 0: the two swap.
struct Sigmoid {
  float s, one_minus_s;
};
[[gnu::always_inline]] inline Sigmoid sigmoid(float z) {
  const float e = exp_nonpositive(-std::fabs(z));
  const float r = 1.0f / (1.0f + e);
  const float er = e * r;
  return z >= 0.0f ? Sigmoid{r, er} : Sigmoid{er, r};
}

[[gnu::always_inline]] inline float gelu_u(float x) {
  return kGeluScale * (x + kGeluCubic * x * x * x);
}

AISCALE_CPU_HOT void gelu_forward_slice(float* out, const float* inp, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = inp[i] * sigmoid(2.0f * gelu_u(inp[i])).s;
}

// d/dx = 0.5 (1 + tanh u) + 0.5 x sech^2(u) du/dx
//      = s + 2 x s (1 - s) du/dx, with s = sigmoid(2u).
// dinp may alias dout: iteration i reads dout[i] and then writes dinp[i] only, so the
// loop is vectorisable in either case (the simd pragma says so to the compiler).
AISCALE_CPU_HOT void gelu_backward_slice(float* dinp, const float* inp, const float* dout,
                                         int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float x = inp[i];
    const float du_dx = kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
    const Sigmoid sg = sigmoid(2.0f * gelu_u(x));
    const float local_grad = sg.s + 2.0f * x * sg.s * sg.one_minus_s * du_dx;
    dinp[i] = local_grad * dout[i];
  }
}

AISCALE_CPU_HOT void add_slice(float* out, const float* a, const float* b, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

AISCALE_CPU_HOT void accumulate_slice(float* d, const float* dout, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) d[i] += dout[i];
}

}  // namespace

void gelu_forward(float* out, const float* inp, int64_t n) {
  // out (n), inp (n)
  parallel_slices(n, 1, [&](int64_t begin, int64_t end) {
    gelu_forward_slice(out + begin, inp + begin, end - begin);
  });
}

void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) {
  // dinp (n) overwritten, may alias dout (n); inp (n)
  parallel_slices(n, 1, [&](int64_t begin, int64_t end) {
    gelu_backward_slice(dinp + begin, inp + begin, dout + begin, end - begin);
  });
}

void residual_forward(float* out, const float* a, const float* b, int64_t n) {
  // out, a, b (n)
  parallel_slices(n, 1, [&](int64_t begin, int64_t end) {
    add_slice(out + begin, a + begin, b + begin, end - begin);
  });
}

void residual_backward(float* da, float* db, const float* dout, int64_t n) {
  // da, db (n) accumulate; dout (n)
  parallel_slices(n, 1, [&](int64_t begin, int64_t end) {
    accumulate_slice(da + begin, dout + begin, end - begin);
    accumulate_slice(db + begin, dout + begin, end - begin);
  });
}

}  // namespace aiscale::ops::cpu
