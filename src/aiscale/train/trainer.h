// The training loop: micro-steps with gradient accumulation, gradient averaging across
// ranks, global-norm clipping, AdamW with a schedule, evaluation, metrics, progress.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "aiscale/nn/models/gpt.h"
#include "aiscale/parallel/algorithms/gradient_exchange.h"
#include "aiscale/parallel/comm.h"
#include "aiscale/train/config.h"
#include "aiscale/train/run_dir.h"
#include "aiscale/train/step_log.h"

namespace aiscale::profile {
class OpProfiler;
}

namespace aiscale::train {
class MetricsOutputs;

// How far a batch source has read: the first `sample` samples (windows) of epoch `epoch`'s
// order have been served, by all data-parallel ranks together. Counted in samples, not
// batches, so it means the same whatever the number of data-parallel ranks, the batch size
// or the accumulation: a checkpoint resumes in another layout at the same sample.
struct DataPosition {
  int64_t epoch = 0;
  int64_t sample = 0;
  bool operator==(const DataPosition&) const = default;
};

// Where batches come from: token shards, or synthetic tokens for benchmarks.
class BatchSource {
 public:
  virtual ~BatchSource() = default;
  // Fills B*T inputs and B*T targets (next tokens).
  virtual void next_batch(int32_t* inputs, int32_t* targets) = 0;
  // Rewinds to the start (validation passes always see the same batches).
  virtual void rewind() = 0;
  virtual std::string describe() const = 0;
  virtual DataPosition position() const = 0;
  virtual void restore(const DataPosition& p) = 0;
};

struct StepStats {
  int64_t step = 0;      // 1-based optimizer step
  double loss = 0;       // mean over micro-steps and ranks
  double lr = 0;
  double grad_norm = 0;  // before clipping
  double step_time_s = 0;
  double tokens_per_s = 0;
  double data_wait_s = 0;  // this rank's time in next_batch
  double sync_s = 0;       // this rank's time in the trainer's all-reduces
  double pipeline_wait_s = 0;  // this rank's time waiting for other pipeline stages
  int64_t epoch = 0;       // of the step's first batch
  bool first_in_epoch = false, last_in_epoch = false;  // holds an epoch's first/last batch
};

struct TrainResult {
  int64_t steps = 0;
  double first_loss = 0, final_loss = 0;
  double val_loss = -1;  // < 0: no validation data
  double tokens_per_s_median = 0;
  double pipeline_bubble_median = -1;  // rank 0's pipeline wait / step time; < 0: no pipeline
  double step_time_median_s = 0, step_time_p90_s = 0;
  double wall_s = 0;
  std::vector<double> losses;
  // The gradient exchange: parallel.allreduce, grad_mixing, compression and the bytes per
  // step (GradientExchange::describe), for the run's summary.
  nlohmann::json communication;
};

class Trainer {
 public:
  Trainer(const TrainConfig& config, nn::GptModel& model, BatchSource& train, BatchSource* val,
          parallel::Communicator& comm, RunDirectory* run_dir);
  // Runs config.steps optimizer steps from `start_step` (0 for a fresh run).
  TrainResult run(int64_t start_step = 0);
  // One optimizer step; returns its statistics (used by run and by benchmarks).
  StepStats step(int64_t step_index);
  double evaluate();
  // Called after each step (checkpointing, signal handling); return false to stop early.
  std::function<bool(const StepStats&)> after_step;
  // Called between gradient averaging and the update (fault injection in tests).
  std::function<void(int64_t step_index)> before_update;
  // Called on the host before every backward pass (fault injection: a straggling rank).
  std::function<void(int64_t step_index)> before_backward;
  // TensorBoard / MLLOG outputs (rank 0; not owned; null: none).
  MetricsOutputs* outputs = nullptr;
  // Show a progress line (rank 0 only).
  bool show_progress = true;
  // Steps flagged as warm-up in steps.jsonl (from the run's first step).
  int64_t record_warmup_steps = 1;
  // --profile: the steps in the profiler's window are recorded into it (not owned; null:
  // nothing is recorded). After the window the device spans are resolved (end_profile).
  profile::OpProfiler* profiler = nullptr;
  // Ends the window early (a run stopped before it was complete); idempotent.
  void end_profile();
  // The per-step record of a step's statistics (for steps.jsonl).
  StepRecord step_record(const StepStats& s, bool warmup) const;

 private:
  const TrainConfig& config_;
  nn::GptModel& model_;
  BatchSource& train_;
  BatchSource* val_;
  parallel::Communicator& comm_;
  RunDirectory* run_dir_;
  std::vector<int32_t> inputs_, targets_;
  bool profile_ended_ = false;
  // Sums (mixes, compresses) the gradients where the model leaves that to the trainer.
  std::unique_ptr<parallel::algorithms::GradientExchange> exchange_;
};

}  // namespace aiscale::train
