// Divergence detection: a training loss that rises far above its running level means the
// run has blown up (too high a learning rate, bad data); going on only wastes the machine
// and buries the last good state under worse checkpoints. Two shapes are caught: a spike
// (one step far above the steps before it) and a sustained climb (the loss drifting up over
// many steps, each step close to the one before, so that no single step is a spike).
#pragma once
#include <cstdint>
#include <deque>
#include <optional>
#include <string>

namespace aiscale::train {

class DivergenceDetector {
 public:
  // Spike: diverged when a step's loss exceeds `factor` times the mean of the previous
  // `window` finite losses (judged once at least min(window, 5) are known). factor = 0: off.
  // Climb: diverged when the median loss of the last `climb_window` finite steps exceeds
  // `climb_factor` times the lowest median of `climb_window` consecutive steps seen so far.
  // A median, not a mean: isolated spikes (the spike check's business) do not move it, so
  // only a climb that holds for half the window counts. climb_factor = 0: off.
  DivergenceDetector(double factor, int64_t window, double climb_factor = 0,
                     int64_t climb_window = 100);
  // Feeds one step's loss (non-finite losses are counted elsewhere and not fed to the
  // running level). Returns why the run diverged, or nothing.
  std::optional<std::string> observe(int64_t step, double loss);
  double running_level() const;
  // After observe() reported a divergence: the last step N whose state (checkpoint step_N)
  // is judged good. The loss of step N + 1 is computed with the state after step N, so
  // before a spike at step S that is S - 2, and in a climb one less than the newest step of
  // the window with the lowest median whose loss is at or below that median (checkpoints
  // after it hold weights from the climb). 0 when no step is.
  int64_t last_good_step() const { return last_good_step_; }

 private:
  std::optional<std::string> observe_climb(int64_t step, double loss);

  double factor_;
  size_t window_;
  std::deque<double> recent_;
  double sum_ = 0;

  double climb_factor_;
  size_t climb_window_;
  std::deque<std::pair<int64_t, double>> climb_recent_;  // (step, loss)
  double best_median_ = 0;
  int64_t best_first_step_ = 0, best_last_step_ = 0;
  int64_t best_level_step_ = 0;  // the newest step of that window at or below its median
  bool have_best_ = false;
  int64_t last_good_step_ = 0;
};

}  // namespace aiscale::train
