#pragma once
#include <cstdint>

#include "aiscale/train/config.h"

namespace aiscale::train {
// Learning rate at optimizer step `step` (0-based): linear warm-up from lr/warmup to lr
// over warmup_steps, then cosine (or linear) decay to lr*min_lr_ratio at the last step.
double learning_rate(const TrainConfig& c, int64_t step);
}  // namespace aiscale::train
