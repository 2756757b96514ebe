#include "aiscale/train/vision_trainer.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "aiscale/core/error.h"
#include "aiscale/core/stats.h"
#include "aiscale/core/timer.h"
#include "aiscale/train/progress.h"
#include "aiscale/train/step_log.h"

namespace aiscale::train {

VisionTrainer::VisionTrainer(const VisionTrainConfig& config, nn::ResNet& model, optim::Sgd& sgd,
                             const optim::LrSchedule& schedule, int64_t total_steps,
                             data::ImageSource& train, data::ImageSource* val,
                             parallel::Communicator& comm, RunDirectory* run_dir)
    : config_(config), model_(model), sgd_(sgd), schedule_(schedule), total_steps_(total_steps),
      train_(train), val_(val), comm_(comm), run_dir_(run_dir) {}

VisionTrainer::Step VisionTrainer::step(int64_t index) {
  Step s;
  Timer total;
  s.epoch = train_.position().epoch;
  s.first_in_epoch = train_.position().index == 0;
  Timer wait;
  train_.next_batch(batch_);
  s.data_wait_s = wait.seconds();
  s.last_in_epoch = train_.position().index == 0;
  if (batch_.layout != data::ImageLayout::nchw)
    fail("the vision trainer takes NCHW batches; the image source served NHWC");
  const int64_t n = batch_.n;
  if (gpu) return gpu_step(index, s, total, n);
  const double loss = model_.forward(batch_.pixels.data(), batch_.labels.data(), n, true);
  model_.zero_grad();
  model_.backward();
  int64_t top1 = 0, top5 = 0;
  model_.count_correct(batch_.labels.data(), n, top1, top5);

  // Data parallelism: sum the ranks' gradients and average; the loss and the correct
  // counts travel in one small all-reduce of doubles.
  Timer sync;
  std::vector<float>& grads = model_.grads();
  double totals[4] = {loss * double(n), double(top1), double(top5), double(n)};
  if (comm_.world() > 1) {
    comm_.allreduce_sum(grads.data(), int64_t(grads.size()));
    const float inv = 1.0f / float(comm_.world());
    for (float& g : grads) g *= inv;
    comm_.allreduce_sum(totals, 4);
  }
  s.sync_s = sync.seconds();
  s.loss = totals[0] / totals[3];
  s.top1 = totals[1] / totals[3];
  s.top5 = totals[2] / totals[3];
  if (!std::isfinite(s.loss)) {
    fail("step {}: the loss is {}: lower train.lr (peak {:.4g}) or raise train.warmup_epochs",
         index + 1, s.loss, schedule_.peak_lr);
  }
  s.lr = optim::scheduled_lr(schedule_, index);
  sgd_.step(model_.params().data(), grads.data(), s.lr);
  s.step_time_s = total.seconds();
  return s;
}

VisionTrainer::Step VisionTrainer::gpu_step(int64_t index, Step s, const Timer& total,
                                            int64_t n) {
  const double loss = gpu->forward(batch_.pixels.data(), batch_.labels.data(), n, true);
  gpu->zero_grad();
  gpu->backward();
  int64_t top1 = 0, top5 = 0;
  gpu->count_correct(top1, top5);
  Timer sync;
  gpu->allreduce_gradients(comm_);
  double totals[4] = {loss * double(n), double(top1), double(top5), double(n)};
  if (comm_.world() > 1) comm_.allreduce_sum(totals, 4);
  s.sync_s = sync.seconds();
  s.loss = totals[0] / totals[3];
  s.top1 = totals[1] / totals[3];
  s.top5 = totals[2] / totals[3];
  if (!std::isfinite(s.loss)) {
    fail("step {}: the loss is {}: lower train.lr (peak {:.4g}) or raise train.warmup_epochs",
         index + 1, s.loss, schedule_.peak_lr);
  }
  s.lr = optim::scheduled_lr(schedule_, index);
  gpu->sgd_step(s.lr, 1.0f / float(comm_.world()));
  gpu->synchronize();
  s.step_time_s = total.seconds();
  return s;
}

VisionEval VisionTrainer::evaluate() {
  VisionEval e;
  if (!val_) return e;
  val_->restore({0, 0});  // every pass sees the same images
  const int64_t batches = config_.eval_batches > 0
                              ? std::min(config_.eval_batches, val_->batches_per_epoch())
                              : val_->batches_per_epoch();
  // loss sum, top-1, top-5, images, corrupt records skipped
  double totals[5] = {0, 0, 0, 0, 0};
  const int64_t skipped_before = val_->stats().skipped_corrupt;
  data::ImageBatch b;
  for (int64_t i = 0; i < batches; ++i) {
    val_->next_batch(b);
    int64_t top1 = 0, top5 = 0;
    double loss = 0;
    if (gpu) {
      loss = gpu->forward(b.pixels.data(), b.labels.data(), b.n, false);
      gpu->count_correct(top1, top5);
    } else {
      loss = model_.forward(b.pixels.data(), b.labels.data(), b.n, false);
      model_.count_correct(b.labels.data(), b.n, top1, top5);
    }
    totals[0] += loss * double(b.n);
    totals[1] += double(top1);
    totals[2] += double(top5);
    totals[3] += double(b.n);
  }
  totals[4] = double(val_->stats().skipped_corrupt - skipped_before);
  comm_.allreduce_sum(totals, 5);
  e.skipped_corrupt = int64_t(totals[4]);
  if (totals[3] == 0) return e;
  e.loss = totals[0] / totals[3];
  e.top1 = totals[1] / totals[3];
  e.top5 = totals[2] / totals[3];
  e.images = int64_t(totals[3]);
  return e;
}

VisionResult VisionTrainer::run(int64_t start_step) {
  VisionResult r;
  Timer wall;
  const bool lead = comm_.rank() == 0;
  Progress progress("step", total_steps_, 10.0);
  StepLog step_log(run_dir_ ? run_dir_->path() + "/steps.jsonl" : std::string(), comm_,
                   start_step > 0 ? start_step : -1, train_.position().epoch);
  std::vector<double> step_times, rates;
  double window_top1 = 0, window_images = 0;
  EpochRecord epoch;
  bool epoch_open = false;
  Timer epoch_wall;
  const int64_t global_batch = train_.batch_size() * comm_.world();
  for (int64_t i = start_step; i < total_steps_; ++i) {
    if (!epoch_open) {
      epoch = EpochRecord{};
      epoch.epoch = train_.position().epoch;
      epoch.first_step = i + 1;
      epoch_wall = Timer();
      epoch_open = true;
    }
    const Step s = step(i);
    const int64_t number = i + 1;
    StepRecord rec_step;
    rec_step.step = number;
    rec_step.epoch = s.epoch;
    rec_step.step_time_s = s.step_time_s;
    rec_step.data_wait_s = s.data_wait_s;
    rec_step.sync_s = s.sync_s;
    rec_step.loss = s.loss;
    rec_step.samples = train_.batch_size();
    rec_step.first_in_epoch = s.first_in_epoch;
    rec_step.last_in_epoch = s.last_in_epoch;
    rec_step.warmup = i == start_step;
    step_log.add(rec_step);
    epoch.train_s += s.step_time_s;
    epoch.last_step = number;
    if (i == start_step) r.first_loss = s.loss;
    r.final_loss = s.loss;
    const double images_per_s = double(global_batch) / s.step_time_s;
    if (i > start_step || total_steps_ - start_step == 1) {
      step_times.push_back(s.step_time_s);
      rates.push_back(images_per_s);
    }
    window_top1 += s.top1 * double(global_batch);
    window_images += double(global_batch);
    nlohmann::json rec = {{"step", number},         {"epoch", s.epoch},
                          {"loss", s.loss},         {"lr", s.lr},
                          {"top1", s.top1},         {"top5", s.top5},
                          {"images_per_s", images_per_s}, {"step_time_s", s.step_time_s}};
    const bool eval_now = number < total_steps_ &&
                          (config_.eval_every > 0 ? number % config_.eval_every == 0
                                                  : s.last_in_epoch);
    if (eval_now && val_) {
      Timer val_timer;
      const VisionEval e = evaluate();
      epoch.val_s += val_timer.seconds();
      rec["val_loss"] = e.loss;
      rec["val_top1"] = e.top1;
      rec["val_top5"] = e.top5;
      if (lead && show_progress)
        progress.update(number, fmt::format("val loss {:.4f} | val top-1 {:.2f}%", e.loss,
                                            100 * e.top1));
    }
    if (s.last_in_epoch) {
      epoch.complete = true;
      epoch.wall_s = epoch_wall.seconds();
      step_log.add_epoch(epoch);
      epoch_open = false;
    }
    // Validation figures are always written, whatever the logging interval.
    if (number % config_.log_every == 0 || number == total_steps_ || rec.contains("val_loss")) {
      r.train_top1 = window_images > 0 ? window_top1 / window_images : 0;
      window_top1 = window_images = 0;
      if (run_dir_) run_dir_->append_metrics(rec);
    }
    if (lead && show_progress)
      progress.update(number, fmt::format("loss {:.4f} | top-1 {:.1f}% | lr {:.2e} | {} img/s",
                                          s.loss, 100 * s.top1, s.lr,
                                          format_count(images_per_s)));
    r.steps = number;
    if (after_step && !after_step(number)) {
      r.stopped = true;
      break;
    }
  }
  if (lead && show_progress) progress.finish();
  Timer val_timer;
  // A run stopped early (a signal: the job's time is running out) skips the final pass.
  if (!r.stopped) r.val = evaluate();
  if (epoch_open) {
    epoch.val_s += val_timer.seconds();
    epoch.wall_s = epoch_wall.seconds();
    step_log.add_epoch(epoch);
  }
  if (run_dir_ && r.val.loss >= 0) {
    run_dir_->append_metrics({{"step", r.steps}, {"val_loss", r.val.loss},
                              {"val_top1", r.val.top1}, {"val_top5", r.val.top5}});
  }
  step_log.add_rank_event("memory", {{"peak_memory_bytes", double(process_peak_rss_bytes())}});
  step_log.finish();
  r.wall_s = wall.seconds();
  r.step_time_median_s = median(step_times);
  r.images_per_s_median = median(rates);
  return r;
}

}  // namespace aiscale::train
