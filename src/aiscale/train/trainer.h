// The training loop for every model (GPT on tokens, ResNet on images): micro-steps with
// gradient accumulation, the data-parallel wrapper's gradient exchange and optimizer step
// (optim/data_parallel.h; models that synchronise themselves through
// train/managed_models.h), global-norm clipping, the learning-rate schedule, evaluation,
// metrics.jsonl, steps.jsonl, the progress line. The session around it (session.cpp,
// vision_session.cpp) builds the model, the data and the wrapper, and handles checkpoints,
// signals and divergence through after_step.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "aiscale/nn/model.h"
#include "aiscale/nn/models/gpt.h"
#include "aiscale/parallel/comm.h"
#include "aiscale/optim/data_parallel.h"
#include "aiscale/train/batch_feed.h"
#include "aiscale/train/config.h"
#include "aiscale/train/run_dir.h"
#include "aiscale/train/step_log.h"

namespace aiscale::profile {
class OpProfiler;
}

namespace aiscale::train {
class MetricsOutputs;

// What the loop needs of a run's configuration, from a GPT config (loop_config) or a vision
// config (vision_session.cpp).
struct LoopConfig {
  int64_t steps = 1;           // the run's last optimizer step
  int64_t grad_accum = 1;      // micro-steps per optimizer step
  int data_world = 1;          // ranks reading distinct batches
  int64_t tokens_per_sample = 0;  // seq_len; 0 for images (rates are then in samples)
  double grad_clip = 0;        // global-norm clip; 0: off
  std::function<double(int64_t step_index)> lr;  // the schedule
  int64_t log_every = 1;
  int64_t eval_every = 0;      // steps between validation passes (0: see eval_each_epoch)
  bool eval_each_epoch = false;  // with eval_every = 0: a pass after every epoch's last step
  int64_t eval_batches = 8;    // per pass (BatchFeed::eval_batches)
  // Validation figures written to metrics.jsonl whatever the logging interval, the final
  // pass too (as its own line), and no final pass after a stop (vision runs).
  bool eval_always_logged = false;
  std::string device = "cpu";
  std::string rate_name = "tokens";  // metrics' <rate_name>_per_s and the progress line
  bool record_epoch = false;   // "epoch" in metrics.jsonl
  double flops_per_token = 0;  // for MFU on GPUs (0: none)
};

LoopConfig loop_config(const TrainConfig& c, int data_world);

struct StepStats {
  int64_t step = 0;      // 1-based optimizer step
  double loss = 0;       // mean over micro-steps and ranks
  double lr = 0;
  double grad_norm = 0;  // before clipping
  double step_time_s = 0;
  double tokens_per_s = 0;  // tokens (or samples, for images) per second
  double data_wait_s = 0;  // this rank's time in next_batch
  double sync_s = 0;       // this rank's time in the gradient exchange and the loss all-reduce
  double pipeline_wait_s = 0;  // this rank's time waiting for other pipeline stages
  std::vector<double> metrics;  // the model's metrics (Model::metric_names) over all ranks
  int64_t epoch = 0;       // of the step's first batch
  bool first_in_epoch = false, last_in_epoch = false;  // holds an epoch's first/last batch
};

struct EvalResult {
  double loss = -1;  // < 0: no validation data
  std::vector<double> metrics;
  int64_t samples = 0;
  int64_t skipped_corrupt = 0;  // corrupt records skipped in this pass, over all ranks
};

struct TrainResult {
  int64_t steps = 0;
  double first_loss = 0, final_loss = 0;
  double val_loss = -1;  // < 0: no validation data
  EvalResult val;
  std::vector<double> window_metrics;  // the model's metrics over the last logged window
  double tokens_per_s_median = 0;
  double pipeline_bubble_median = -1;  // rank 0's pipeline wait / step time; < 0: no pipeline
  double step_time_median_s = 0, step_time_p90_s = 0;
  double wall_s = 0;
  bool stopped = false;  // after_step stopped the run
  std::vector<double> losses;
  // The gradient exchange: the data-parallel wrapper, parallel.allreduce, grad_mixing,
  // compression and the bytes per step, for the run's summary.
  nlohmann::json communication;
};

class Trainer {
 public:
  // Any model, with its data-parallel wrapper and feeds (not owned).
  Trainer(LoopConfig loop, nn::Model& model, optim::DataParallel& dp, BatchFeed& train,
          BatchFeed* val, parallel::Communicator& comm, RunDirectory* run_dir);
  // A GPT run: the token feeds are built and owned here, and the wrapper of the config
  // (make_data_parallel) too unless `dp` (not owned) is given.
  Trainer(const TrainConfig& config, nn::GptModel& model, BatchSource& train, BatchSource* val,
          parallel::Communicator& comm, RunDirectory* run_dir,
          optim::DataParallel* dp = nullptr);
  ~Trainer();
  // Runs optimizer steps up to the loop's last from `start_step` (0 for a fresh run).
  TrainResult run(int64_t start_step = 0);
  // One optimizer step; returns its statistics (used by run and by benchmarks).
  StepStats step(int64_t step_index);
  // A validation pass: the mean loss (< 0 without validation data).
  double evaluate() { return evaluate_all().loss; }
  EvalResult evaluate_all();
  optim::DataParallel& data_parallel() { return *dp_; }
  // Called after each step (checkpointing, signal handling); return false to stop early.
  std::function<bool(const StepStats&)> after_step;
  // Called after the step's backward passes, before the gradient exchange and the update
  // (fault injection in tests).
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
  nlohmann::json metrics_record(const StepStats& s) const;
  void set_profiler(profile::OpProfiler* p);

  LoopConfig loop_;
  nn::Model& model_;
  nn::GptModel* gpt_ = nullptr;  // a GPT model: separate forward/backward spans, pipelines
  std::unique_ptr<BatchFeed> own_train_, own_val_;
  std::unique_ptr<optim::DataParallel> own_dp_;
  BatchFeed* train_;
  BatchFeed* val_;
  optim::DataParallel* dp_;
  parallel::Communicator& comm_;
  RunDirectory* run_dir_;
  bool profile_ended_ = false;
};

}  // namespace aiscale::train
