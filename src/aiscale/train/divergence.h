// Divergence detection: a training loss that rises far above its running level means the
// run has blown up (too high a learning rate, bad data); going on only wastes the machine
// and buries the last good state under worse checkpoints.
#pragma once
#include <cstdint>
#include <deque>
#include <optional>
#include <string>

namespace aiscale::train {

class DivergenceDetector {
 public:
  // Diverged when a step's loss exceeds `factor` times the mean of the previous `window`
  // finite losses (judged once at least min(window, 5) are known). factor = 0: off.
  DivergenceDetector(double factor, int64_t window);
  // Feeds one step's loss (non-finite losses are counted elsewhere and not fed to the
  // running level). Returns why the run diverged, or nothing.
  std::optional<std::string> observe(int64_t step, double loss);
  double running_level() const;

 private:
  double factor_;
  size_t window_;
  std::deque<double> recent_;
  double sum_ = 0;
};

}  // namespace aiscale::train
