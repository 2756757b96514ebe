// Asynchronous successive halving (ASHA, Li et al., "A System for Massively Parallel
// Hyperparameter Tuning", MLSys 2020), in its stopping form: every trial trains towards the
// full budget and reports its validation loss at the rungs min_budget x eta^k; at each rung
// it goes on only when its loss is among the best 1/eta of the losses recorded at that rung
// so far (at least the best one), and is stopped otherwise. No trial waits for another, so
// the workers never idle; the price is that the decisions depend on the order in which the
// trials reach a rung (the early ones pass more easily), as in every asynchronous scheme.
#pragma once
#include <cstdint>
#include <map>
#include <vector>

namespace aiscale::sweep {

// The decision rungs: min_budget, min_budget x eta, ... below max_budget (the end of
// training is not a rung: a trial that reaches it has finished).
std::vector<int64_t> asha_rungs(int64_t min_budget, int64_t max_budget, int64_t eta);

class Asha {
 public:
  Asha(int64_t eta, std::vector<int64_t> rungs);

  const std::vector<int64_t>& rungs() const { return rungs_; }
  bool is_rung(int64_t step) const;

  // Records `loss` of `trial` at rung `step` and returns whether the trial goes on. A NaN
  // loss never goes on. `exempt` (the default configuration, the search's baseline)
  // is recorded but always goes on. Recording the same trial and rung again returns the
  // first decision (a resumed trial reports its rungs again).
  bool record(int64_t trial, int64_t step, double loss, bool exempt = false);
  // A decision made before (read back from the study directory), kept as it was.
  void restore(int64_t trial, int64_t step, double loss, bool went_on);

  // The trials recorded at a rung, best first: (loss, trial).
  std::vector<std::pair<double, int64_t>> recorded(int64_t step) const;

 private:
  int64_t eta_;
  std::vector<int64_t> rungs_;
  struct Entry {
    double loss;
    bool went_on;
  };
  std::map<int64_t, std::map<int64_t, Entry>> by_rung_;  // step -> trial -> entry
};

}  // namespace aiscale::sweep
