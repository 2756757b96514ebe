// AdamW on the CPU: the reference's arithmetic (PyTorch's order), in chunks over the threads.
// Memory-bound: 7 floats move per parameter (p, g, m, v in; p, m, v out).
#include <cmath>
#if defined(__SSE2__)
#include <immintrin.h>
#endif

#include "aiscale/ops/cpu/kernels.h"
#include "aiscale/ops/cpu/simd.h"

namespace aiscale::ops::cpu {
namespace {

struct AdamWConstants {
  float beta1, beta2, eps, grad_scale;
  float decay;                  // 1 - lr * weight_decay
  float step_size;              // lr / (1 - beta1^step)
  float bias_correction2_sqrt;  // sqrt(1 - beta2^step)
};

// One element, in the reference's order of operations.
[[gnu::always_inline]] inline void adamw_element(float& param, float grad, float& m, float& v,
                                                 const AdamWConstants& k) {
  const float g = grad * k.grad_scale;
  m = m + (1.0f - k.beta1) * (g - m);
  v = k.beta2 * v + (1.0f - k.beta2) * g * g;
  const float denom = std::sqrt(v) / k.bias_correction2_sqrt + k.eps;
  param = param * k.decay - k.step_size * (m / denom);
}

#if defined(__SSE2__)
// The same arithmetic four lanes at a time. Written with SSE intrinsics because GCC
// will not vectorise a loop calling std::sqrt unless the whole build has
// -fno-math-errno (v >= 0 here, so errno never matters).
void adamw_slice(float* params, const float* grads, float* m, float* v, int64_t n,
                 const AdamWConstants& k) {
  const __m128 grad_scale = _mm_set1_ps(k.grad_scale);
  const __m128 one_minus_beta1 = _mm_set1_ps(1.0f - k.beta1);
  const __m128 beta2 = _mm_set1_ps(k.beta2), one_minus_beta2 = _mm_set1_ps(1.0f - k.beta2);
  const __m128 bc2_sqrt = _mm_set1_ps(k.bias_correction2_sqrt), eps = _mm_set1_ps(k.eps);
  const __m128 decay = _mm_set1_ps(k.decay), step_size = _mm_set1_ps(k.step_size);
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const __m128 g = _mm_mul_ps(_mm_loadu_ps(grads + i), grad_scale);
    __m128 m_i = _mm_loadu_ps(m + i);
    m_i = _mm_add_ps(m_i, _mm_mul_ps(one_minus_beta1, _mm_sub_ps(g, m_i)));
    __m128 v_i = _mm_loadu_ps(v + i);
    v_i = _mm_add_ps(_mm_mul_ps(beta2, v_i), _mm_mul_ps(_mm_mul_ps(one_minus_beta2, g), g));
    const __m128 denom = _mm_add_ps(_mm_div_ps(_mm_sqrt_ps(v_i), bc2_sqrt), eps);
    const __m128 p = _mm_loadu_ps(params + i);
    const __m128 update = _mm_mul_ps(step_size, _mm_div_ps(m_i, denom));
    _mm_storeu_ps(params + i, _mm_sub_ps(_mm_mul_ps(p, decay), update));
    _mm_storeu_ps(m + i, m_i);
    _mm_storeu_ps(v + i, v_i);
  }
  for (; i < n; ++i) adamw_element(params[i], grads[i], m[i], v[i], k);
}
#else
void adamw_slice(float* params, const float* grads, float* m, float* v, int64_t n,
                 const AdamWConstants& k) {
  for (int64_t i = 0; i < n; ++i) adamw_element(params[i], grads[i], m[i], v[i], k);
}
#endif

}  // namespace

void adamw_update(float* params, const float* grads, float* m, float* v, int64_t n,
                  const AdamWParams& hp) {
  // params, grads, m, v (n)
  const double bias_correction1 = 1.0 - std::pow(double(hp.beta1), double(hp.step));
  const double bias_correction2 = 1.0 - std::pow(double(hp.beta2), double(hp.step));
  const AdamWConstants k{hp.beta1,
                         hp.beta2,
                         hp.eps,
                         hp.grad_scale,
                         1.0f - hp.lr * hp.weight_decay,
                         float(double(hp.lr) / bias_correction1),
                         float(std::sqrt(bias_correction2))};
  parallel_slices(n, 1, [&](int64_t begin, int64_t end) {
    adamw_slice(params + begin, grads + begin, m + begin, v + begin, end - begin, k);
  });
}

}  // namespace aiscale::ops::cpu
