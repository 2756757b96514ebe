// The vision training loop: one ResNet per rank on the CPU or a GPU, data-parallel SGD (the ranks'
// gradients summed with one all-reduce and averaged, as the GPT CPU path does), top-1/top-5
// accuracy of every training batch and of validation passes, metrics.jsonl, steps.jsonl and
// the progress line. Run set-up, checkpoints and resume: vision_session.cpp.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "aiscale/data/images/image_source.h"
#include "aiscale/nn/models/resnet.h"
#include "aiscale/nn/models/resnet_cuda.h"
#include "aiscale/core/timer.h"
#include "aiscale/optim/sgd.h"
#include "aiscale/parallel/comm.h"
#include "aiscale/train/run_dir.h"
#include "aiscale/train/vision_config.h"

namespace aiscale::train {

struct VisionEval {
  double loss = -1, top1 = 0, top5 = 0;  // loss < 0: no validation data
  int64_t images = 0;
  int64_t skipped_corrupt = 0;  // corrupt records skipped in this pass, over all ranks
};

struct VisionResult {
  int64_t steps = 0;
  double first_loss = 0, final_loss = 0;
  double train_top1 = 0;  // over the last logged window of steps
  VisionEval val;
  double images_per_s_median = 0, step_time_median_s = 0, wall_s = 0;
  bool stopped = false;  // after_step stopped the run early (no final validation pass)
};

class VisionTrainer {
 public:
  // total_steps and the schedule are resolved by the caller from the config and the source.
  VisionTrainer(const VisionTrainConfig& config, nn::ResNet& model, optim::Sgd& sgd,
                const optim::LrSchedule& schedule, int64_t total_steps,
                data::ImageSource& train, data::ImageSource* val,
                parallel::Communicator& comm, RunDirectory* run_dir);
  VisionResult run(int64_t start_step);
  VisionEval evaluate();
  // Called after each step with its 1-based number (checkpoints); false stops the run.
  std::function<bool(int64_t step)> after_step;
  bool show_progress = true;
  // Set for a GPU run: this model trains (forward, backward, all-reduce, SGD on the
  // device); `model` and `sgd` are then its host mirror, brought up to date by the caller
  // (ResNetCuda::download) before checkpoints.
  nn::ResNetCuda* gpu = nullptr;

 private:
  struct Step {
    double loss = 0, top1 = 0, top5 = 0, lr = 0, step_time_s = 0, data_wait_s = 0, sync_s = 0;
    int64_t epoch = 0;
    bool first_in_epoch = false, last_in_epoch = false;
  };
  Step step(int64_t index);
  Step gpu_step(int64_t index, Step s, const Timer& total, int64_t n);

  const VisionTrainConfig& config_;
  nn::ResNet& model_;
  optim::Sgd& sgd_;
  optim::LrSchedule schedule_;
  int64_t total_steps_;
  data::ImageSource& train_;
  data::ImageSource* val_;
  parallel::Communicator& comm_;
  RunDirectory* run_dir_;
  data::ImageBatch batch_;
};

}  // namespace aiscale::train
