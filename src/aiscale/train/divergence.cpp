#include "aiscale/train/divergence.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include <fmt/format.h>

namespace aiscale::train {

DivergenceDetector::DivergenceDetector(double factor, int64_t window, double climb_factor,
                                       int64_t climb_window)
    : factor_(factor),
      window_(static_cast<size_t>(std::max<int64_t>(window, 1))),
      climb_factor_(climb_factor),
      climb_window_(static_cast<size_t>(std::max<int64_t>(climb_window, 1))) {}

double DivergenceDetector::running_level() const {
  return recent_.empty() ? 0.0 : sum_ / static_cast<double>(recent_.size());
}

std::optional<std::string> DivergenceDetector::observe(int64_t step, double loss) {
  if (!std::isfinite(loss)) return std::nullopt;
  if (factor_ > 0) {
    const size_t needed = std::min<size_t>(window_, 5);
    if (recent_.size() >= needed) {
      const double level = running_level();
      if (level > 0 && loss > factor_ * level) {
        last_good_step_ = std::max<int64_t>(0, step - 2);
        return fmt::format("the loss of step {} is {:.4g}, {:.1f} times its running level {:.4g} "
                           "(mean of the {} steps before; train.divergence_factor = {})",
                           step, loss, loss / level, level, recent_.size(), factor_);
      }
    }
    recent_.push_back(loss);
    sum_ += loss;
    if (recent_.size() > window_) {
      sum_ -= recent_.front();
      recent_.pop_front();
    }
  }
  return observe_climb(step, loss);
}

std::optional<std::string> DivergenceDetector::observe_climb(int64_t step, double loss) {
  if (climb_factor_ <= 0) return std::nullopt;
  climb_recent_.emplace_back(step, loss);
  if (climb_recent_.size() > climb_window_) climb_recent_.pop_front();
  if (climb_recent_.size() < climb_window_) return std::nullopt;
  // O(window) per step: a few thousand comparisons at most, nothing beside a training step.
  std::vector<double> losses;
  losses.reserve(climb_recent_.size());
  for (const auto& [s, l] : climb_recent_) losses.push_back(l);
  const size_t mid = losses.size() / 2;
  std::nth_element(losses.begin(), losses.begin() + static_cast<std::ptrdiff_t>(mid), losses.end());
  double median = losses[mid];
  if (losses.size() % 2 == 0) {
    const double below = *std::max_element(losses.begin(), losses.begin() + static_cast<std::ptrdiff_t>(mid));
    median = 0.5 * (median + below);
  }
  const int64_t first = climb_recent_.front().first;
  if (!have_best_ || median <= best_median_) {
    have_best_ = true;
    best_median_ = median;
    best_first_step_ = first;
    best_last_step_ = step;
    // The newest step of this window still at its median level: the steps after it may
    // already be the start of a climb (or a spike the median does not see).
    best_level_step_ = first;
    for (auto it = climb_recent_.rbegin(); it != climb_recent_.rend(); ++it)
      if (it->second <= median) {
        best_level_step_ = it->first;
        break;
      }
    return std::nullopt;
  }
  if (best_median_ > 0 && median > climb_factor_ * best_median_) {
    last_good_step_ = std::max<int64_t>(0, best_level_step_ - 1);
    return fmt::format(
        "the loss has climbed for a sustained stretch: its median over steps {}-{} is {:.4g}, "
        "{:.2f} times the lowest median of {} consecutive steps ({:.4g}, steps {}-{}; "
        "train.divergence_climb_factor = {}, train.divergence_climb_window = {})",
        first, step, median, median / best_median_, climb_window_, best_median_,
        best_first_step_, best_last_step_, climb_factor_, climb_window_);
  }
  return std::nullopt;
}

}  // namespace aiscale::train
