// A search over training runs (`aiscale tune` with study.backend = "train"): each trial is
// an `aiscale train` run of one training config with some keys set, in its own run
// directory under the study's; trials run side by side on the node's GPUs (one or several
// each), on CPU ranks, or as Slurm job steps; asynchronous successive halving (asha.h)
// stops the trials whose validation loss at a rung is not among the best; an interrupted
// study resumes without running a finished trial again.
//
// The study directory (study.dir):
//   tune.json                  the study's text and the training config's, fingerprinted;
//                              a rerun of another study there is refused (--fresh)
//   trials/<name>/             the trial's run directory (config.toml, metrics.jsonl, ...)
//   trials/<name>.json         its state: keys, status, validation curve, rung decisions
//   trials/<name>.log          its output
//   results.csv, results.json  the leaderboard (the default configuration among the rows)
//   best/config.toml           the best finished trial's resolved config, ready to train
#pragma once
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "aiscale/tune/space.h"

namespace aiscale::sweep {

struct TrainSearchOptions {
  bool fresh = false;       // discard the trials of an earlier run of the directory
  bool quiet = false;       // no line per trial event
  std::string study_text;   // the study file's text with its --set lines, for tune.json
  std::string self_exe;     // the aiscale the trials run; empty: this one
};

struct TrialRung {
  int64_t step = 0;
  double val_loss = 0;
  bool went_on = true;
};

struct TrialRecord {
  int64_t trial = -1;  // -1: the default configuration (the training config as it is)
  std::string name;    // "default", "trial-003"
  tune::Params params;  // the keys this trial sets ([fixed] and its draw)
  // pending | running | finished | stopped (by the halving) | failed | diverged
  std::string status = "pending";
  std::vector<std::pair<int64_t, double>> curve;  // validation loss by step
  std::vector<TrialRung> rungs;
  int64_t last_step = 0;  // the last training step the trial logged
  double val_loss = std::numeric_limits<double>::quiet_NaN();  // its last validation loss
  int exit_code = -1;
  std::string error;      // why it failed: its config's error or its log's last lines
  double seconds = 0;       // its processes' wall time, every attempt
  double step_seconds = 0;  // its training steps' time (metrics.jsonl step_time_s)
  int64_t attempts = 0;
};

struct TrainSearchOutcome {
  std::vector<TrialRecord> trials;  // the default first, then by trial number
  int64_t best = -2;                // the best finished trial's number; -2: none finished
  bool interrupted = false;         // stopped by SIGINT/SIGTERM: run again to resume
  int64_t started = 0, resumed = 0, skipped = 0;  // trials started fresh / from a checkpoint / already done
  double wall_seconds = 0;
  int64_t parallel_trials = 0;
  double busy_share = 0;  // this run's trial processes: their time over wall time x parallel trials
  double step_share = 0;  // their training steps' time over the same
  std::vector<int64_t> rungs;
  std::string dir;
};

// The keys a train study may set: those of the training config `base` (GPT and Llama runs,
// or the image classifier's), with the config's own values (after `set`) as defaults.
tune::TrainKeyCatalogue train_key_catalogue();

TrainSearchOutcome run_train_search(const tune::StudyConfig& c, const TrainSearchOptions& o);

// "finished", "stopped at step 40", "failed (exit 1)": for tables.
std::string trial_status_text(const TrialRecord& t);

}  // namespace aiscale::sweep
