#include "aiscale/train/divergence.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace aiscale::train {

DivergenceDetector::DivergenceDetector(double factor, int64_t window)
    : factor_(factor), window_(static_cast<size_t>(std::max<int64_t>(window, 1))) {}

double DivergenceDetector::running_level() const {
  return recent_.empty() ? 0.0 : sum_ / static_cast<double>(recent_.size());
}

std::optional<std::string> DivergenceDetector::observe(int64_t step, double loss) {
  if (factor_ <= 0 || !std::isfinite(loss)) return std::nullopt;
  const size_t needed = std::min<size_t>(window_, 5);
  if (recent_.size() >= needed) {
    const double level = running_level();
    if (level > 0 && loss > factor_ * level)
      return fmt::format("the loss of step {} is {:.4g}, {:.1f} times its running level {:.4g} "
                         "(mean of the {} steps before; train.divergence_factor = {})",
                         step, loss, loss / level, level, recent_.size(), factor_);
  }
  recent_.push_back(loss);
  sum_ += loss;
  if (recent_.size() > window_) {
    sum_ -= recent_.front();
    recent_.pop_front();
  }
  return std::nullopt;
}

}  // namespace aiscale::train
