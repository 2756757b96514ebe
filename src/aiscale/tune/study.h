// A hyperparameter study: trials x folds as tasks, spread over this rank's threads and
// over MPI ranks, successive halving between rungs, one result file per task (so an
// interrupted study resumes where it stopped), the merged table, and the best trial
// retrained on all rows and saved.
//
// The tune directory (study.dir):
//   tune.json            what the study is (config text, fingerprint); a resumed study must match
//   tasks/<task>.json    one finished task: trial, fold, rung, budget, score, seconds, rank
//   results.csv/.json    one row per trial (and the default hyperparameters' row)
//   best/params.json     the best trial's hyperparameters and cross-validated score
//   best/model.json      it, retrained on every row (MLP weights or XGBoost's JSON model)
//   scaling.csv/.json    the scaling table (aiscale tune --scaling)
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "aiscale/parallel/comm.h"
#include "aiscale/tune/dataset.h"
#include "aiscale/tune/space.h"

namespace aiscale::tune {

struct TrialResult {
  int64_t trial = -1;  // -1: the default hyperparameters
  Params params;       // every hyperparameter (defaults filled in), budget included
  int64_t rung = 0;    // the last rung the trial ran in
  int64_t folds = 0;
  double score = 0;    // mean over folds (NaN: diverged)
  double score_std = 0;
  double seconds = 0;  // summed over its tasks, every rung
};

struct StudyOutcome {
  std::vector<TrialResult> trials;  // by trial number
  TrialResult defaults;
  TrialResult best;
  int64_t tasks_run = 0, tasks_resumed = 0;
  bool merged = true;  // false for one shard of a job array: no table, no best model
  double wall_seconds = 0;
  std::string dir;
};

struct RunOptions {
  bool fresh = false;   // discard the task results of an earlier run of this directory
  bool quiet = false;
  std::string config_text;  // the study file's text (with --set lines), for tune.json
  // A share of the tasks for one job of a Slurm job array: shard k of n runs the tasks
  // whose index i satisfies i mod (n x ranks) = k x ranks + rank, writes their result files
  // and stops; a later run without a shard (every task then found) merges the results.
  int64_t shard = 0, shards = 1;
};

// Loads the data a study names ([data]), subsampled as asked.
Dataset load_study_data(const StudyConfig& c);

StudyOutcome run_study(StudyConfig c, const Dataset& data, parallel::Communicator& comm, const RunOptions& o);

// Better-than for the study's metric; NaN is worse than everything.
bool better(Metric m, double a, double b);

}  // namespace aiscale::tune
