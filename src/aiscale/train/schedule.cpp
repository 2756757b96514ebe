#include "aiscale/train/schedule.h"

#include <algorithm>
#include <cmath>

namespace aiscale::train {

double learning_rate(const TrainConfig& c, int64_t step) {
  if (c.warmup_steps > 0 && step < c.warmup_steps)
    return c.lr * static_cast<double>(step + 1) / static_cast<double>(c.warmup_steps);
  if (c.schedule == "constant") return c.lr;
  const double min_lr = c.lr * c.min_lr_ratio;
  const int64_t decay_steps = c.steps - c.warmup_steps;
  if (decay_steps <= 1) return c.lr;
  double progress = static_cast<double>(step - c.warmup_steps) / static_cast<double>(decay_steps - 1);
  progress = std::clamp(progress, 0.0, 1.0);
  double coeff = c.schedule == "linear" ? 1.0 - progress
                                        : 0.5 * (1.0 + std::cos(3.14159265358979323846 * progress));
  return min_lr + coeff * (c.lr - min_lr);
}

}  // namespace aiscale::train
