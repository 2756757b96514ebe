// AdamW on the CPU: the reference's arithmetic (PyTorch's order), one slice per thread.
#include <cmath>

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

AISCALE_CPU_HOT void adamw_slice(float* params, const float* grads, float* m, float* v,
                                 int64_t n, AdamWConstants k) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float g = grads[i] * k.grad_scale;
    const float m_i = m[i] + (1.0f - k.beta1) * (g - m[i]);
    const float v_i = k.beta2 * v[i] + (1.0f - k.beta2) * g * g;
    m[i] = m_i;
    v[i] = v_i;
    const float denom = std::sqrt(v_i) / k.bias_correction2_sqrt + k.eps;
    params[i] = params[i] * k.decay - k.step_size * (m_i / denom);
  }
}

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
  parallel_slices(n, 8, [&](int64_t begin, int64_t end) {
    adamw_slice(params + begin, grads + begin, m + begin, v + begin, end - begin, k);
  });
}

}  // namespace aiscale::ops::cpu
