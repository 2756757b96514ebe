#include "aiscale/optim/sgd.h"

#include <cmath>

#include "aiscale/core/error.h"

namespace aiscale::optim {

Sgd::Sgd(int64_t state_size, SgdOptions options, std::vector<uint8_t> decay)
    : options_(options), decay_(std::move(decay)), velocity_(state_size, 0.0f) {
  AISCALE_CHECK(decay_.empty() || int64_t(decay_.size()) >= state_size,
                "decay mask of {} values for {} values of state", decay_.size(), state_size);
}

Sgd::~Sgd() = default;

void Sgd::step(float* params, const float* grads, double lr) {
  StepParams p;
  p.lr = lr;
  step(params, grads, int64_t(velocity_.size()), 0, 0, p);
}

void Sgd::step(float* params, const float* grads, int64_t n, int64_t state_offset,
               int64_t first_value, const StepParams& p) {
  AISCALE_CHECK(state_offset >= 0 && state_offset + n <= int64_t(velocity_.size()) &&
                    (decay_.empty() || first_value + n <= int64_t(decay_.size())),
                "SGD step of values [{}, {}) with state at {} of {}", first_value,
                first_value + n, state_offset, velocity_.size());
  const float mu = float(options_.momentum), wd = float(options_.weight_decay), rate = float(p.lr);
  const float scale = p.grad_scale;
  const bool nesterov = options_.nesterov, masked = !decay_.empty();
  const uint8_t* mask = decay_.data() + (masked ? first_value : 0);
  float* v = velocity_.data() + state_offset;
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    // The old path scaled the summed gradients in place first; one rounding either way.
    float g = scale == 1.0f ? grads[i] : grads[i] * scale;
    if (!masked || mask[i]) g += wd * params[i];
    v[i] = mu * v[i] + g;
    params[i] -= rate * (nesterov ? g + mu * v[i] : v[i]);
  }
}

double linear_scaled_lr(double base_lr, int64_t global_batch, int64_t reference_batch) {
  AISCALE_CHECK(global_batch > 0 && reference_batch > 0, "batch sizes {} and {}", global_batch,
                reference_batch);
  return base_lr * double(global_batch) / double(reference_batch);
}

double scheduled_lr(const LrSchedule& s, int64_t step) {
  if (step < s.warmup_steps) return s.peak_lr * double(step + 1) / double(s.warmup_steps);
  const int64_t after = step - s.warmup_steps;
  const int64_t span = std::max<int64_t>(s.total_steps - s.warmup_steps, 1);
  if (s.decay == "cosine") {
    const double progress = std::min(double(after) / double(span), 1.0);
    return s.min_lr + 0.5 * (s.peak_lr - s.min_lr) * (1.0 + std::cos(M_PI * progress));
  }
  if (s.decay == "step" && s.step_every > 0) {
    return s.peak_lr * std::pow(s.gamma, double(after / s.step_every));
  }
  return s.peak_lr;
}

}  // namespace aiscale::optim
