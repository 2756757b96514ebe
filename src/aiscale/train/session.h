// One `aiscale train` invocation from start to end: ranks, model, data, run directory,
// resume, periodic asynchronous checkpoints, preemption signals, NaN/Inf handling.
#pragma once
#include <string>
#include <vector>

namespace aiscale::train {

struct TrainRequest {
  std::string config_path;             // TOML config (optional with resume_dir)
  std::vector<std::string> overrides;  // "section.key=value"
  std::string resume_dir;              // continue this run directory from its newest checkpoint
  bool quiet = false;
};

// Returns the process exit code (0: finished or stopped cleanly by a signal).
int run_training(const TrainRequest& request);

// Fault injection for tests, from the environment variable AISCALE_FAULT:
//   "nan@S"         the gradients of step S (1-based) become NaN on every rank
//   "kill@S:R"      rank R kills itself with SIGKILL after step S
//   "term@S"        every rank behaves as if SIGTERM arrived after step S
//   "slow@R:MS"     rank R waits MS milliseconds on the host before every backward pass
//                   (a straggler: the others run ahead as far as the collectives let them)
struct FaultPlan {
  int64_t nan_step = -1, kill_step = -1, term_step = -1;
  int kill_rank = 0;
  int slow_rank = -1;
  double slow_ms = 0;
};
FaultPlan fault_plan_from_env();

}  // namespace aiscale::train
