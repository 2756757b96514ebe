#include "aiscale/train/trainer.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "aiscale/core/error.h"
#include "aiscale/core/log.h"
#include "aiscale/core/stats.h"
#include "aiscale/core/timer.h"
#include "aiscale/train/progress.h"
#include "aiscale/train/schedule.h"

namespace aiscale::train {

Trainer::Trainer(const TrainConfig& config, nn::GptModel& model, BatchSource& train,
                 BatchSource* val, parallel::Communicator& comm, RunDirectory* run_dir)
    : config_(config), model_(model), train_(train), val_(val), comm_(comm), run_dir_(run_dir) {
  const int64_t n = config.batch_size * config.seq_len;
  inputs_.resize(n);
  targets_.resize(n);
}

StepStats Trainer::step(int64_t step_index) {
  Timer timer;
  model_.zero_grad();
  double loss_sum = 0.0;
  const float micro_weight = 1.0f / static_cast<float>(config_.grad_accum);
  for (int64_t micro = 0; micro < config_.grad_accum; ++micro) {
    // Only the last micro-step's backward synchronises the gradients over the ranks.
    model_.set_gradient_sync(micro + 1 == config_.grad_accum);
    train_.next_batch(inputs_.data(), targets_.data());
    loss_sum += model_.forward(inputs_.data(), targets_.data());
    if (before_backward) before_backward(step_index);
    model_.backward(micro_weight);
  }
  const int world = comm_.world();
  // A data-parallel GPU model (NCCL) has reduced its gradient buckets during backward.
  // Otherwise the whole buffer is summed here; on a GPU model it is a device buffer.
  if (world > 1 && !model_.data_parallel()) comm_.allreduce_sum(model_.grad_buffer(), model_.num_params());
  if (before_update) before_update(step_index);
  // Gradients are now summed over ranks. parallel.grad_reduce = "average" (DDP) takes
  // their mean, sum / world, by folding 1/world into the norm and the update's scale;
  // "sum" keeps the sum.
  const double reduce_divisor = config_.grad_reduce == "sum" ? 1.0 : static_cast<double>(world);
  double grad_norm = std::sqrt(model_.grad_sum_squares()) / reduce_divisor;
  const double local_loss = loss_sum / static_cast<double>(config_.grad_accum);
  StepStats s;
  s.step = step_index + 1;
  s.lr = learning_rate(config_, step_index);
  s.grad_norm = grad_norm;
  double clip = config_.grad_clip > 0 && grad_norm > config_.grad_clip ? config_.grad_clip / grad_norm : 1.0;
  ops::AdamWParams hp;
  hp.lr = static_cast<float>(s.lr);
  hp.beta1 = static_cast<float>(config_.beta1);
  hp.beta2 = static_cast<float>(config_.beta2);
  hp.eps = static_cast<float>(config_.eps);
  hp.weight_decay = static_cast<float>(config_.weight_decay);
  hp.step = step_index + 1;
  hp.grad_scale = static_cast<float>(clip / reduce_divisor);
  // Every rank decides alike: a rank with a NaN/Inf loss has NaN/Inf gradients, and the
  // norm is of the gradients summed over all ranks.
  if (std::isfinite(grad_norm) && std::isfinite(local_loss)) model_.update(hp);
  // The mean loss over ranks, while the GPU runs the update.
  double stats[1] = {local_loss};
  if (world > 1) comm_.allreduce_sum(stats, 1);
  s.loss = stats[0] / world;
  s.step_time_s = timer.seconds();
  s.tokens_per_s = static_cast<double>(config_.tokens_per_step(world)) / s.step_time_s;
  return s;
}

double Trainer::evaluate() {
  if (!val_) return -1.0;
  val_->rewind();
  double sum = 0.0;
  for (int64_t i = 0; i < config_.eval_batches; ++i) {
    val_->next_batch(inputs_.data(), targets_.data());
    sum += model_.forward(inputs_.data(), targets_.data());
  }
  double buf[1] = {sum / static_cast<double>(config_.eval_batches)};
  comm_.allreduce_sum(buf, 1);
  return buf[0] / comm_.world();
}

TrainResult Trainer::run(int64_t start_step) {
  TrainResult r;
  Timer wall;
  const bool lead = comm_.rank() == 0;
  Progress progress("step", config_.steps, 10.0);
  std::vector<double> step_times, rates;
  for (int64_t i = start_step; i < config_.steps; ++i) {
    StepStats s = step(i);
    if (!std::isfinite(s.loss) || !std::isfinite(s.grad_norm))
      log::warn("step {}: non-finite loss {} or gradient norm {}; update skipped", s.step, s.loss,
                s.grad_norm);
    if (i == start_step) r.first_loss = s.loss;
    r.final_loss = s.loss;
    r.losses.push_back(s.loss);
    // The first step includes warm-up effects (page faults, thread start); leave it out.
    if (i > start_step || config_.steps - start_step == 1) {
      step_times.push_back(s.step_time_s);
      rates.push_back(s.tokens_per_s);
    }
    nlohmann::json rec = {{"step", s.step},           {"loss", s.loss},
                          {"lr", s.lr},               {"grad_norm", s.grad_norm},
                          {"tokens_per_s", s.tokens_per_s}, {"step_time_s", s.step_time_s}};
    bool eval_now = config_.eval_every > 0 && s.step % config_.eval_every == 0 && s.step < config_.steps;
    if (eval_now) {
      double vl = evaluate();
      if (vl >= 0) rec["val_loss"] = vl;
    }
    if (run_dir_ && (s.step % config_.log_every == 0 || s.step == config_.steps))
      run_dir_->append_metrics(rec);
    if (lead && show_progress)
      progress.update(s.step, fmt::format("loss {:.4f} | lr {:.2e} | {} tok/s", s.loss, s.lr,
                                          format_count(s.tokens_per_s)));
    r.steps = s.step;
    if (after_step && !after_step(s)) break;
  }
  if (lead && show_progress) progress.finish();
  r.val_loss = evaluate();
  r.wall_s = wall.seconds();
  r.step_time_median_s = median(step_times);
  r.step_time_p90_s = percentile(step_times, 0.9);
  r.tokens_per_s_median = median(rates);
  return r;
}

}  // namespace aiscale::train
