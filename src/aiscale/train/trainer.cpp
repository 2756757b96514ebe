#include "aiscale/train/trainer.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include <fmt/format.h>

#include "aiscale/core/error.h"
#include "aiscale/core/log.h"
#include "aiscale/core/stats.h"
#include "aiscale/core/timer.h"
#include "aiscale/parallel/bootstrap.h"
#include "aiscale/profile/device_info.h"
#include "aiscale/profile/gpu_power.h"
#include "aiscale/profile/op_profiler.h"
#include "aiscale/train/gpu_status.h"
#include "aiscale/train/metrics_outputs.h"
#include "aiscale/train/progress.h"
#include "aiscale/train/schedule.h"

namespace aiscale::train {

Trainer::Trainer(const TrainConfig& config, nn::GptModel& model, BatchSource& train,
                 BatchSource* val, parallel::Communicator& comm, RunDirectory* run_dir)
    : config_(config), model_(model), train_(train), val_(val), comm_(comm), run_dir_(run_dir) {
  const int64_t n = config.batch_size * config.seq_len;
  inputs_.resize(n);
  targets_.resize(n);
  if (comm.world() > 1 && !model.data_parallel()) {
    parallel::algorithms::GradientExchangeOptions eo;
    eo.mixing = grad_mixing_of(config);
    eo.compression = config.compression;
    eo.topk_ratio = config.topk_ratio;
    eo.allreduce = config.allreduce;
    for (const auto& p : nn::gpt_param_infos(config.model)) eo.segments.push_back(p.offset);  // AdaSum per tensor
    std::sort(eo.segments.begin(), eo.segments.end());
    exchange_ = std::make_unique<parallel::algorithms::GradientExchange>(comm, eo, model.num_params());
  }
}

StepStats Trainer::step(int64_t step_index) {
  // --profile: only the window's steps are recorded; elsewhere `prof` is null.
  profile::OpProfiler* prof = profiler && profiler->in_window(step_index) ? profiler : nullptr;
  if (prof && step_index == prof->first_step()) model_.set_profiler(prof);
  if (prof) prof->begin_step(step_index);
  using profile::ScopedSpan;
  using profile::SpanKind;
  Timer timer;
  {
    ScopedSpan span(prof, "zero_grad", SpanKind::op, profile::kHostTrack, 0,
                    4.0 * double(model_.num_params()));
    model_.zero_grad();
  }
  double loss_sum = 0.0, data_wait = 0.0, sync = 0.0, pipeline_wait = 0.0;
  const float micro_weight = 1.0f / static_cast<float>(config_.grad_accum);
  const int64_t epoch = train_.position().epoch;
  bool first_in_epoch = false, last_in_epoch = false;
  for (int64_t micro = 0; micro < config_.grad_accum; ++micro) {
    // Only the last micro-step's backward synchronises the gradients over the ranks.
    model_.set_gradient_sync(micro + 1 == config_.grad_accum);
    const DataPosition before = train_.position();
    const double t0 = timer.seconds();
    {
      ScopedSpan span(prof, "next_batch", SpanKind::data, profile::kDataTrack);
      train_.next_batch(inputs_.data(), targets_.data());
    }
    data_wait += timer.seconds() - t0;
    // A source moves to the next epoch right after serving an epoch's last batch.
    if (before.sample == 0) first_in_epoch = true;
    if (train_.position().epoch != before.epoch) last_in_epoch = true;
    if (model_.pipelined()) {  // the schedule interleaves the micro-batches' passes
      if (before_backward) before_backward(step_index);
      ScopedSpan span(prof, "forward_backward", SpanKind::phase);
      loss_sum += model_.forward_backward(inputs_.data(), targets_.data(), micro_weight);
      pipeline_wait += model_.pipeline_wait_s();
      continue;
    }
    {
      ScopedSpan span(prof, "forward", SpanKind::phase);
      loss_sum += model_.forward(inputs_.data(), targets_.data());
    }
    if (before_backward) before_backward(step_index);
    ScopedSpan span(prof, "backward", SpanKind::phase);
    model_.backward(micro_weight);
  }
  const int world = comm_.world();
  // Ranks that read distinct batches (the others of a tensor group or pipeline share them).
  const int data_world = world / static_cast<int>(config_.tensor_parallel * config_.pipeline_parallel);
  // A data-parallel GPU model (NCCL) has reduced its gradient buckets during backward, a
  // CPU model holding tensor slices or ZeRO-2/3 shards its gradients over its data group.
  // Otherwise the whole buffer is summed here; on a GPU model it is a device buffer.
  if (world > 1 && !model_.data_parallel()) {
    const double t0 = timer.seconds();
    ScopedSpan span(prof, "allreduce gradients", SpanKind::comm, profile::kCommTrack, 0,
                    4.0 * double(model_.num_params()));
    exchange_->exchange(model_.grad_buffer());  // parallel.allreduce, grad_mixing, compression
    sync += timer.seconds() - t0;
  }
  if (before_update) before_update(step_index);
  // Gradients are now summed over ranks (or AdaSum-combined). parallel.grad_mixing =
  // "average" (DDP) takes their mean, sum / world, by folding 1/world into the norm and
  // the update's scale; "sum" keeps the sum; AdaSum's result is one gradient's size.
  const double reduce_divisor = grad_mixing_of(config_) == "average" ? static_cast<double>(data_world) : 1.0;
  double grad_sum_squares = 0;
  {
    ScopedSpan span(prof, "sum_squares", SpanKind::op, profile::kHostTrack, 2.0 * double(model_.num_params()),
                    4.0 * double(model_.num_params()));
    grad_sum_squares = model_.grad_sum_squares();
  }
  double grad_norm = std::sqrt(grad_sum_squares) / reduce_divisor;
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
  if (std::isfinite(grad_norm) && std::isfinite(local_loss)) {
    ScopedSpan span(prof, "update", SpanKind::phase);
    model_.update(hp);
  }
  // The mean loss over ranks, while the GPU runs the update.
  double stats[1] = {local_loss};
  if (world > 1) {
    const double t0 = timer.seconds();
    ScopedSpan span(prof, "allreduce loss", SpanKind::comm, profile::kCommTrack, 0, 8.0);
    comm_.allreduce_sum(stats, 1);
    sync += timer.seconds() - t0;
  }
  s.loss = stats[0] / world;  // the ranks of a tensor group hold the same loss
  s.step_time_s = timer.seconds();
  s.data_wait_s = data_wait;
  s.sync_s = sync;
  s.pipeline_wait_s = pipeline_wait;
  s.epoch = epoch;
  s.first_in_epoch = first_in_epoch;
  s.last_in_epoch = last_in_epoch;
  s.tokens_per_s = static_cast<double>(config_.tokens_per_step(data_world)) / s.step_time_s;
  if (prof) {
    prof->end_step(step_index, s.step_time_s);
    if (prof->window_done()) end_profile();
  }
  return s;
}

void Trainer::end_profile() {
  if (!profiler || profile_ended_) return;
  profiler->resolve();  // the device's spans, read now that the window is over
  model_.set_profiler(nullptr);
  profile_ended_ = true;
}

StepRecord Trainer::step_record(const StepStats& s, bool warmup) const {
  StepRecord r;
  r.step = s.step;
  r.epoch = s.epoch;
  r.step_time_s = s.step_time_s;
  r.data_wait_s = s.data_wait_s;
  r.sync_s = s.sync_s;
  r.loss = s.loss;
  r.samples = config_.batch_size * config_.grad_accum;
  r.tokens = r.samples * config_.seq_len;
  r.first_in_epoch = s.first_in_epoch;
  r.last_in_epoch = s.last_in_epoch;
  r.warmup = warmup;
  return r;
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
  std::vector<double> step_times, rates, bubbles;
  // steps.jsonl: every rank's step records, gathered to rank 0 (see step_log.h).
  const int64_t start_epoch = train_.position().epoch;
  StepLog step_log(run_dir_ ? run_dir_->path() + "/steps.jsonl" : std::string(), comm_,
                   start_step > 0 ? start_step : -1, start_epoch);
  // The epoch in progress: its wall time runs from its first step's start to the end of
  // its last step and of any validation pass after it.
  // On GPUs: board power and SM clock after the warm-up steps (a sampler thread of its
  // own; the stepping thread makes no NVML call), as steps.jsonl's gpu_power event.
  std::unique_ptr<profile::GpuPowerMeter> meter;
  if (config_.device == "cuda" && step_log.enabled())
    meter = std::make_unique<profile::GpuPowerMeter>(parallel::cuda_current_gpu_pci_bus_id());
  bool meter_started = false;
  // Rank 0's node's GPUs for the progress line and the metrics outputs (NVML, own thread).
  std::unique_ptr<GpuStatusSampler> gpus;
  if (lead && config_.device == "cuda" && (show_progress || outputs)) gpus = std::make_unique<GpuStatusSampler>();
  // MFU for the metrics outputs: achieved FLOP/s per device against the GPU's dense peak.
  const double peak_tflops =
      config_.device == "cuda" ? profile::gpu_dense_bf16_peak_tflops(model_.device_name()) : 0.0;
  const double flops_per_token = nn::gpt_train_flops_per_token(config_.model, config_.seq_len);
  EpochRecord epoch;
  epoch.epoch = start_epoch;
  Timer epoch_wall;
  bool epoch_open = false;
  for (int64_t i = start_step; i < config_.steps; ++i) {
    if (epoch_open && epoch.complete) {  // closed by the previous step
      step_log.add_epoch(epoch);
      if (outputs) outputs->epoch_stop(epoch.epoch);
      epoch_open = false;
    }
    if (!epoch_open) {
      epoch = EpochRecord{};
      epoch.epoch = train_.position().epoch;
      epoch.first_step = i + 1;
      epoch_wall = Timer();
      epoch_open = true;
      if (outputs) outputs->epoch_start(epoch.epoch);
    }
    if (meter && !meter_started && (i - start_step == record_warmup_steps || config_.steps - i == 1)) {
      meter->start();
      meter_started = true;
    }
    StepStats s = step(i);
    step_log.add(step_record(s, i - start_step < record_warmup_steps));
    epoch.train_s += s.step_time_s;
    epoch.last_step = s.step;
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
    if (model_.pipelined()) {
      // The pipeline bubble as this rank saw it: its time waiting for other stages.
      rec["pipeline_wait_s"] = s.pipeline_wait_s;
      rec["pipeline_bubble"] = s.pipeline_wait_s / s.step_time_s;
      if (i > start_step || config_.steps - start_step == 1) bubbles.push_back(rec["pipeline_bubble"]);
    }
    if (exchange_ && config_.compression != "none") rec["grad_wire_bytes"] = exchange_->wire_bytes();
    bool eval_now = config_.eval_every > 0 && s.step % config_.eval_every == 0 && s.step < config_.steps;
    if (eval_now) {
      Timer val_timer;
      double vl = evaluate();
      epoch.val_s += val_timer.seconds();
      if (vl >= 0) rec["val_loss"] = vl;
      if (outputs && vl >= 0) outputs->eval(s.step, vl, /*more_steps=*/true);
    }
    if (s.last_in_epoch) {
      epoch.complete = true;
      epoch.wall_s = epoch_wall.seconds();
    }
    const bool log_now = s.step % config_.log_every == 0 || s.step == config_.steps;
    if (run_dir_ && log_now) run_dir_->append_metrics(rec);
    const std::vector<profile::NodeGpu> gpu_now = gpus ? gpus->latest() : std::vector<profile::NodeGpu>{};
    if (outputs && log_now) {
      StepScalars sc{s.step, s.loss, s.lr, s.grad_norm, s.tokens_per_s};
      if (peak_tflops > 0)
        sc.mfu = s.tokens_per_s / comm_.world() * flops_per_token / (peak_tflops * 1e12);
      sc.memory_bytes = config_.device == "cuda" ? double(model_.memory_bytes()) : double(process_peak_rss_bytes());
      if (!gpu_now.empty() && gpu_now[0].power_w >= 0) {
        sc.power_w = 0;  // the node's GPUs together
        for (const auto& g : gpu_now) sc.power_w += std::max(0.0, g.power_w);
      }
      outputs->step(sc);
    }
    if (lead && show_progress) {
      const std::string gpu_text = gpu_status_text(gpu_now);
      progress.update(s.step, fmt::format("loss {:.4f} | lr {:.2e} | {} tok/s{}", s.loss, s.lr,
                                          format_count(s.tokens_per_s),
                                          gpu_text.empty() ? "" : " | " + gpu_text));
    }
    r.steps = s.step;
    if (after_step && !after_step(s)) break;
  }
  if (lead && show_progress) progress.finish();
  end_profile();  // a run stopped inside the window
  Timer val_timer;
  r.val_loss = evaluate();
  if (outputs && r.val_loss >= 0) outputs->eval(r.steps, r.val_loss, /*more_steps=*/false);
  // The final validation pass belongs to the epoch of the last step.
  if (epoch_open) {
    const double val_s = val_timer.seconds();
    epoch.val_s += val_s;
    epoch.wall_s = epoch.complete ? epoch.wall_s + val_s : epoch_wall.seconds();
    step_log.add_epoch(epoch);
    if (outputs) outputs->epoch_stop(epoch.epoch);
  }
  // GPU: the memory the model holds on the device; CPU: the process's peak resident set.
  const double peak_memory = config_.device == "cuda" ? double(model_.memory_bytes())
                                                      : double(process_peak_rss_bytes());
  step_log.add_rank_event("memory", {{"peak_memory_bytes", peak_memory},
                                     {"model_memory_bytes", double(model_.memory_bytes())}});
  if (meter) {  // every GPU rank adds the event (a collective), measured or not
    const profile::GpuPowerWindow p = meter_started ? meter->stop() : profile::GpuPowerWindow{};
    step_log.add_rank_event("gpu_power", profile::gpu_power_event_fields(p, meter->available() && meter_started));
  }
  step_log.finish();
  r.communication = exchange_ ? exchange_->describe()
                              : nlohmann::json{{"allreduce", config_.allreduce},
                                               {"grad_mixing", grad_mixing_of(config_)},
                                               {"compression", config_.compression},
                                               {"gradient_sync", comm_.world() > 1 ? "in the model" : "none (one rank)"}};
  r.wall_s = wall.seconds();
  r.step_time_median_s = median(step_times);
  r.step_time_p90_s = percentile(step_times, 0.9);
  r.tokens_per_s_median = median(rates);
  if (!bubbles.empty()) r.pipeline_bubble_median = median(bubbles);
  return r;
}

}  // namespace aiscale::train
