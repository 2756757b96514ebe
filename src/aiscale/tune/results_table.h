// The merged results of a study: results.csv (one row per trial, the default
// hyperparameters first) and results.json (the same, with the rungs, the best trial and
// how it ran), and best/params.json. Written by rank 0, each file atomically.
#pragma once
#include <string>
#include <vector>

#include "aiscale/tune/study.h"

namespace aiscale::tune {

struct RungSummary {
  int64_t rung = 0;
  int64_t budget = -1;  // -1: each trial's own (no successive halving)
  int64_t trials = 0;
  int64_t tasks = 0;
  double seconds = 0;
};

void write_results(const StudyConfig& c, const Dataset& d, const StudyOutcome& out,
                   const std::vector<RungSummary>& rungs, int ranks, int threads_per_rank);

}  // namespace aiscale::tune
