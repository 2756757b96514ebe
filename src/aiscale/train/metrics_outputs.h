// The metrics outputs beside metrics.jsonl, each turned on by a config key (and the
// option named after it): run.tensorboard (TensorBoard event files in <run>/tensorboard/)
// and run.mllog (MLPerf-style :::MLLOG lines in <run>/mllog.txt). Rank 0 writes them.
#pragma once
#include <memory>
#include <string>

#include "aiscale/train/config.h"
#include "aiscale/train/mllog.h"
#include "aiscale/train/tfevents.h"

namespace aiscale::train {

// The scalars of one logged step.
struct StepScalars {
  int64_t step = 0;
  double loss = 0, lr = 0, grad_norm = 0, tokens_per_s = 0;
  double mfu = -1;           // < 0: unknown (no peak figure for the device)
  double memory_bytes = -1;  // < 0: unknown
  double power_w = -1;       // board power of rank 0's GPU; < 0: unknown
};

class MetricsOutputs {
 public:
  MetricsOutputs(const TrainConfig& c, const std::string& run_dir, int world, bool resumed);
  bool any() const { return tb_ || ml_; }

  // MLLOG: the submission keys, the hyperparameters, init_stop, run_start, block_start.
  void run_start(int64_t start_step);
  void step(const StepScalars& s);
  void eval(int64_t step, double val_loss, bool more_steps);
  void epoch_start(int64_t epoch);
  void epoch_stop(int64_t epoch);
  // status: "success" (finished), "aborted" (diverged, interrupted or failed).
  void run_stop(int64_t step, const std::string& status);

  std::string tensorboard_path() const { return tb_ ? tb_->path() : ""; }
  std::string mllog_path() const { return ml_ ? ml_->path() : ""; }

 private:
  const TrainConfig& c_;
  int world_;
  int64_t samples_per_step_;
  bool block_open_ = false;
  std::unique_ptr<TfEventsWriter> tb_;
  std::unique_ptr<MlLog> ml_;
};

}  // namespace aiscale::train
