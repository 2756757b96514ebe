// One `aiscale train` invocation from start to end: ranks, model, data, run directory,
// resume, periodic asynchronous checkpoints, preemption signals, NaN/Inf handling.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace aiscale::parallel {
struct RankContext;
}

namespace aiscale::train {

struct TrainRequest {
  std::string config_path;             // TOML config (optional with resume_dir)
  std::vector<std::string> overrides;  // "section.key=value"
  std::string resume_dir;              // continue this run directory from its newest checkpoint
  int64_t checkpoint_step = -1;        // with resume_dir: resume from this step's checkpoint
  bool resume_fallback = false;        // a corrupt newest checkpoint: use the newest good one
  bool quiet = false;
  // --profile STEPS: profile this many steps after the warm-up step (run dir's profile/).
  std::optional<int64_t> profile_steps;
  // When set, the run's communicator and run directory are kept here, so that the caller
  // can report a failure before the communicator goes (parallel/rank_failure.h).
  parallel::RankContext* rank_context = nullptr;
};

// Exit code of a run stopped because it diverged (loss far above its running level, or
// more than train.max_nonfinite_steps NaN/Inf steps).
inline constexpr int kExitDiverged = 3;

// Returns the process exit code (0: finished or stopped cleanly by a signal;
// kExitDiverged: stopped by divergence detection, with its checkpoint written).
int run_training(const TrainRequest& request);

// Fault injection for tests, from the environment variable AISCALE_FAULT:
//   "nan@S"         the gradients of step S (1-based) become NaN on every rank
//   "kill@S:R"      rank R kills itself with SIGKILL after step S
//   "fail@S:R"      rank R fails with an error after step S (the others wait for it in
//                   the next collective: the report of a rank-local failure)
//   "term@S"        every rank behaves as if SIGTERM arrived after step S
//   "slow@R:MS"     rank R waits MS milliseconds on the host before every backward pass
//                   (a straggler: the others run ahead as far as the collectives let them)
//   "blowup@S"      every weight is multiplied by 30 before the update of step S (the loss
//                   jumps far above its running level: divergence detection)
struct FaultPlan {
  int64_t nan_step = -1, kill_step = -1, term_step = -1, blowup_step = -1, fail_step = -1;
  int kill_rank = 0, fail_rank = 0;
  int slow_rank = -1;
  double slow_ms = 0;
};
FaultPlan fault_plan_from_env();

// Keeps the lines of <run_dir>/metrics.jsonl up to `step` (a resumed run rewrites what came
// after).
void truncate_metrics(const std::string& run_dir, int64_t step);

}  // namespace aiscale::train
