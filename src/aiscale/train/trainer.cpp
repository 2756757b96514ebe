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
#include "aiscale/train/managed_models.h"
#include "aiscale/train/metrics_outputs.h"
#include "aiscale/train/progress.h"
#include "aiscale/train/schedule.h"

namespace aiscale::train {

LoopConfig loop_config(const TrainConfig& c, int data_world) {
  LoopConfig l;
  l.steps = c.steps;
  l.grad_accum = c.grad_accum;
  l.data_world = data_world;
  l.tokens_per_sample = c.seq_len;
  l.grad_clip = c.grad_clip;
  l.lr = [c](int64_t step) { return learning_rate(c, step); };
  l.log_every = c.log_every;
  l.eval_every = c.eval_every;
  l.eval_batches = c.eval_batches;
  l.device = c.device;
  l.flops_per_token = nn::gpt_train_flops_per_token(c.model, c.seq_len);
  return l;
}

Trainer::Trainer(LoopConfig loop, nn::Model& model, optim::DataParallel& dp,
                 BatchFeed& train, BatchFeed* val, parallel::Communicator& comm,
                 RunDirectory* run_dir)
    : loop_(std::move(loop)), model_(model), gpt_(dynamic_cast<nn::GptModel*>(&model)),
      train_(&train), val_(val), dp_(&dp), comm_(comm), run_dir_(run_dir) {}

Trainer::Trainer(const TrainConfig& config, nn::GptModel& model, BatchSource& train,
                 BatchSource* val, parallel::Communicator& comm, RunDirectory* run_dir,
                 optim::DataParallel* dp)
    : model_(model), gpt_(&model), comm_(comm), run_dir_(run_dir) {
  // Ranks that read distinct batches (the others of a tensor group or pipeline share them).
  const int data_world =
      comm.world() / static_cast<int>(config.tensor_parallel * config.pipeline_parallel);
  loop_ = loop_config(config, data_world);
  own_train_ = std::make_unique<TokenFeed>(train, config.batch_size, config.seq_len);
  if (val) own_val_ = std::make_unique<TokenFeed>(*val, config.batch_size, config.seq_len);
  if (!dp) own_dp_ = make_data_parallel(config, model, comm, data_world);
  train_ = own_train_.get();
  val_ = own_val_.get();
  dp_ = dp ? dp : own_dp_.get();
}

Trainer::~Trainer() = default;

void Trainer::set_profiler(profile::OpProfiler* p) {
  if (gpt_) gpt_->set_profiler(p);
  dp_->set_profiler(p);
}

StepStats Trainer::step(int64_t step_index) {
  // --profile: only the window's steps are recorded; elsewhere `prof` is null.
  profile::OpProfiler* prof = profiler && profiler->in_window(step_index) ? profiler : nullptr;
  if (prof && step_index == prof->first_step()) set_profiler(prof);
  if (prof) prof->begin_step(step_index);
  using profile::ScopedSpan;
  using profile::SpanKind;
  const double n_params = double(model_.num_params());
  Timer timer;
  {
    ScopedSpan span(prof, "zero_grad", SpanKind::op, profile::kHostTrack, 0, 4.0 * n_params);
    model_.zero_grad();
  }
  const std::vector<std::string> metric_names = model_.metric_names();
  // loss, the model's metric counts, samples: summed over the ranks in one all-reduce.
  std::vector<double> sums(metric_names.size() + 2, 0.0);
  double data_wait = 0.0, sync = 0.0, pipeline_wait = 0.0;
  const float micro_weight = 1.0f / static_cast<float>(loop_.grad_accum);
  const int64_t epoch = train_->position().epoch;
  bool first_in_epoch = false, last_in_epoch = false;
  for (int64_t micro = 0; micro < loop_.grad_accum; ++micro) {
    // Only the last micro-step's backward synchronises the gradients over the ranks.
    dp_->begin_micro_step(micro + 1 == loop_.grad_accum);
    const DataPosition before = train_->position();
    const double t0 = timer.seconds();
    const nn::Batch* batch = nullptr;
    {
      ScopedSpan span(prof, "next_batch", SpanKind::data, profile::kDataTrack);
      batch = &train_->next();
    }
    data_wait += timer.seconds() - t0;
    // A source moves to the next epoch right after serving an epoch's last batch.
    if (before.sample == 0) first_in_epoch = true;
    if (train_->position().epoch != before.epoch) last_in_epoch = true;
    if (!gpt_ || gpt_->pipelined()) {  // one call: a pipeline interleaves the passes
      if (before_backward) before_backward(step_index);
      ScopedSpan span(prof, "forward_backward", SpanKind::phase);
      sums[0] += model_.train_batch(*batch, micro_weight);
      if (gpt_) pipeline_wait += gpt_->pipeline_wait_s();
    } else {
      {
        ScopedSpan span(prof, "forward", SpanKind::phase);
        sums[0] += gpt_->forward(batch->tokens, batch->targets);
      }
      if (before_backward) before_backward(step_index);
      ScopedSpan span(prof, "backward", SpanKind::phase);
      gpt_->backward(micro_weight);
    }
    model_.add_metrics(sums.data() + 1);
    sums.back() += double(train_->samples_per_batch());
  }
  const int world = comm_.world();
  // Before the exchange, so that what it changes (a poisoned gradient) reaches every
  // wrapper's sums, ZeRO-1's shards included.
  if (before_update) before_update(step_index);
  {
    // DDP's all-reduce or ZeRO-1's reduce-scatter of the buckets; nothing where the model
    // has synchronised its gradients during backward.
    const double t0 = timer.seconds();
    ScopedSpan span(prof, "allreduce gradients", SpanKind::comm, profile::kCommTrack, 0, 4.0 * n_params);
    dp_->reduce_gradients();
    sync += timer.seconds() - t0;
  }
  // Gradients are now summed over ranks (or AdaSum-combined). parallel.grad_mixing =
  // "average" (DDP) takes their mean, sum / world, by folding 1/world into the norm and
  // the update's scale; "sum" keeps the sum; AdaSum's result is one gradient's size.
  const double reduce_divisor = dp_->divisor();
  double grad_sum_squares = 0;
  if (dp_->measures_grad_norm()) {
    ScopedSpan span(prof, "sum_squares", SpanKind::op, profile::kHostTrack, 2.0 * n_params, 4.0 * n_params);
    grad_sum_squares = dp_->grad_sum_squares();
  }
  const double grad_norm = std::sqrt(grad_sum_squares) / reduce_divisor;
  const double local_loss = sums[0] / static_cast<double>(loop_.grad_accum);
  StepStats s;
  s.step = step_index + 1;
  s.lr = loop_.lr(step_index);
  s.grad_norm = grad_norm;
  const double clip = loop_.grad_clip > 0 && grad_norm > loop_.grad_clip ? loop_.grad_clip / grad_norm : 1.0;
  optim::StepParams hp;
  hp.lr = s.lr;
  hp.step = step_index + 1;
  hp.grad_scale = static_cast<float>(clip / reduce_divisor);
  // Every rank decides alike: a rank with a NaN/Inf loss has NaN/Inf gradients, and the
  // norm is of the gradients summed over all ranks.
  if (std::isfinite(grad_norm) && std::isfinite(local_loss)) {
    ScopedSpan span(prof, "update", SpanKind::phase);
    dp_->step(hp);
  }
  // The mean loss over ranks and the metrics' sums, while a GPU runs the update.
  sums[0] = local_loss;
  if (world > 1) {
    const double t0 = timer.seconds();
    ScopedSpan span(prof, "allreduce loss", SpanKind::comm, profile::kCommTrack, 0, 8.0 * double(sums.size()));
    comm_.allreduce_sum(sums.data(), int64_t(sums.size()));
    sync += timer.seconds() - t0;
  }
  s.loss = sums[0] / world;  // the ranks of a tensor group hold the same loss
  // Samples are counted once per data-parallel coordinate.
  const double samples = sums.back() * double(loop_.data_world) / double(world);
  for (size_t k = 0; k < metric_names.size(); ++k)
    s.metrics.push_back(samples > 0 ? sums[1 + k] * double(loop_.data_world) / double(world) / samples : 0.0);
  s.step_time_s = timer.seconds();
  s.data_wait_s = data_wait;
  s.sync_s = sync;
  s.pipeline_wait_s = pipeline_wait;
  s.epoch = epoch;
  s.first_in_epoch = first_in_epoch;
  s.last_in_epoch = last_in_epoch;
  const int64_t per_sample = loop_.tokens_per_sample > 0 ? loop_.tokens_per_sample : 1;
  s.tokens_per_s = static_cast<double>(train_->samples_per_batch() * loop_.grad_accum *
                                       loop_.data_world * per_sample) / s.step_time_s;
  if (prof) {
    prof->end_step(step_index, s.step_time_s);
    if (prof->window_done()) end_profile();
  }
  return s;
}

void Trainer::end_profile() {
  if (!profiler || profile_ended_) return;
  profiler->resolve();  // the device's spans, read now that the window is over
  set_profiler(nullptr);
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
  r.samples = train_->samples_per_batch() * loop_.grad_accum;
  r.tokens = r.samples * loop_.tokens_per_sample;
  r.first_in_epoch = s.first_in_epoch;
  r.last_in_epoch = s.last_in_epoch;
  r.warmup = warmup;
  return r;
}

EvalResult Trainer::evaluate_all() {
  EvalResult e;
  if (!val_) return e;
  val_->rewind();
  const std::vector<std::string> names = model_.metric_names();
  // loss x samples, the metrics' counts, samples, corrupt records skipped
  std::vector<double> sums(names.size() + 3, 0.0);
  const int64_t skipped_before = val_->skipped_corrupt();
  const int64_t batches = val_->eval_batches(loop_.eval_batches);
  for (int64_t i = 0; i < batches; ++i) {
    const nn::Batch& b = val_->next();
    const double n = double(val_->samples_per_batch());
    sums[0] += model_.eval_batch(b) * n;
    model_.add_metrics(sums.data() + 1);
    sums[names.size() + 1] += n;
  }
  sums.back() = double(val_->skipped_corrupt() - skipped_before);
  comm_.allreduce_sum(sums.data(), int64_t(sums.size()));
  const double samples = sums[names.size() + 1];
  e.skipped_corrupt = int64_t(sums.back());
  if (samples <= 0) return e;
  e.loss = sums[0] / samples;
  for (size_t k = 0; k < names.size(); ++k) e.metrics.push_back(sums[1 + k] / samples);
  // The ranks of a tensor group or a pipeline read the same batches: counted once.
  e.samples = int64_t(samples) * loop_.data_world / comm_.world();
  return e;
}

nlohmann::json Trainer::metrics_record(const StepStats& s) const {
  nlohmann::json rec = {{"step", s.step},
                        {"loss", s.loss},
                        {"lr", s.lr},
                        {loop_.rate_name + "_per_s", s.tokens_per_s},
                        {"step_time_s", s.step_time_s},
                        {"data_parallel", dp_->name()}};
  if (dp_->measures_grad_norm()) rec["grad_norm"] = s.grad_norm;
  if (loop_.record_epoch) rec["epoch"] = s.epoch;
  const std::vector<std::string> names = model_.metric_names();
  for (size_t k = 0; k < names.size(); ++k) rec[names[k]] = s.metrics[k];
  return rec;
}

namespace {

void add_eval(nlohmann::json& rec, const EvalResult& e, const std::vector<std::string>& names) {
  rec["val_loss"] = e.loss;
  for (size_t k = 0; k < names.size() && k < e.metrics.size(); ++k) rec["val_" + names[k]] = e.metrics[k];
}

// "top1" -> "top-1": the progress line's name of a metric.
std::string shown(const std::string& name) {
  return name.rfind("top", 0) == 0 ? "top-" + name.substr(3) : name;
}

}  // namespace

TrainResult Trainer::run(int64_t start_step) {
  TrainResult r;
  Timer wall;
  const bool lead = comm_.rank() == 0;
  const std::vector<std::string> names = model_.metric_names();
  Progress progress("step", loop_.steps, 10.0);
  std::vector<double> step_times, rates, bubbles;
  // steps.jsonl: every rank's step records, gathered to rank 0 (see step_log.h).
  const int64_t start_epoch = train_->position().epoch;
  StepLog step_log(run_dir_ ? run_dir_->path() + "/steps.jsonl" : std::string(), comm_,
                   start_step > 0 ? start_step : -1, start_epoch);
  const bool gpu = loop_.device == "cuda";
  // On GPUs: board power and SM clock after the warm-up steps (a sampler thread of its
  // own; the stepping thread makes no NVML call), as steps.jsonl's gpu_power event.
  std::unique_ptr<profile::GpuPowerMeter> meter;
  if (gpu && step_log.enabled())
    meter = std::make_unique<profile::GpuPowerMeter>(parallel::cuda_current_gpu_pci_bus_id());
  bool meter_started = false;
  // Rank 0's node's GPUs for the progress line and the metrics outputs (NVML, own thread).
  std::unique_ptr<GpuStatusSampler> gpus;
  if (lead && gpu && (show_progress || outputs)) gpus = std::make_unique<GpuStatusSampler>();
  // MFU for the metrics outputs: achieved FLOP/s per device against the GPU's dense peak.
  const double peak_tflops =
      gpu && gpt_ ? profile::gpu_dense_bf16_peak_tflops(gpt_->device_name()) : 0.0;
  // The model's memory: a GPT model's device (or host) buffers; else its activations.
  const auto model_memory = [&] {
    return double(gpt_ ? gpt_->memory_bytes() : model_.activation_bytes());
  };
  // The epoch in progress: its wall time runs from its first step's start to the end of
  // its last step and of any validation pass after it.
  EpochRecord epoch;
  epoch.epoch = start_epoch;
  Timer epoch_wall;
  bool epoch_open = false;
  std::vector<double> window(names.size(), 0.0);
  double window_samples = 0;
  const double global_samples =
      double(train_->samples_per_batch() * loop_.grad_accum * loop_.data_world);
  const bool compressed = dp_->describe().value("compression", std::string("none")) != "none";
  for (int64_t i = start_step; i < loop_.steps; ++i) {
    if (epoch_open && epoch.complete) {  // closed by the previous step
      step_log.add_epoch(epoch);
      if (outputs) outputs->epoch_stop(epoch.epoch);
      epoch_open = false;
    }
    if (!epoch_open) {
      epoch = EpochRecord{};
      epoch.epoch = train_->position().epoch;
      epoch.first_step = i + 1;
      epoch_wall = Timer();
      epoch_open = true;
      if (outputs) outputs->epoch_start(epoch.epoch);
    }
    if (meter && !meter_started && (i - start_step == record_warmup_steps || loop_.steps - i == 1)) {
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
    if (i > start_step || loop_.steps - start_step == 1) {
      step_times.push_back(s.step_time_s);
      rates.push_back(s.tokens_per_s);
    }
    for (size_t k = 0; k < names.size(); ++k) window[k] += s.metrics[k] * global_samples;
    window_samples += global_samples;
    nlohmann::json rec = metrics_record(s);
    if (gpt_ && gpt_->pipelined()) {
      // The pipeline bubble as this rank saw it: its time waiting for other stages.
      rec["pipeline_wait_s"] = s.pipeline_wait_s;
      rec["pipeline_bubble"] = s.pipeline_wait_s / s.step_time_s;
      if (i > start_step || loop_.steps - start_step == 1) bubbles.push_back(rec["pipeline_bubble"]);
    }
    if (compressed) rec["grad_wire_bytes"] = dp_->wire_bytes();
    const bool eval_now = s.step < loop_.steps &&
                          (loop_.eval_every > 0 ? s.step % loop_.eval_every == 0
                                                : loop_.eval_each_epoch && s.last_in_epoch);
    if (eval_now && val_) {
      Timer val_timer;
      const EvalResult e = evaluate_all();
      epoch.val_s += val_timer.seconds();
      if (e.loss >= 0) {
        add_eval(rec, e, names);
        if (outputs) outputs->eval(s.step, e.loss, /*more_steps=*/true);
        if (lead && show_progress && !names.empty())
          progress.update(s.step, fmt::format("val loss {:.4f} | val {} {:.2f}%", e.loss,
                                              shown(names[0]), 100 * e.metrics[0]));
      }
    }
    if (s.last_in_epoch) {
      epoch.complete = true;
      epoch.wall_s = epoch_wall.seconds();
    }
    const bool log_now = s.step % loop_.log_every == 0 || s.step == loop_.steps ||
                         (loop_.eval_always_logged && rec.contains("val_loss"));
    if (log_now) {
      r.window_metrics.resize(names.size());
      for (size_t k = 0; k < names.size(); ++k)
        r.window_metrics[k] = window_samples > 0 ? window[k] / window_samples : 0;
      std::fill(window.begin(), window.end(), 0.0);
      window_samples = 0;
    }
    if (run_dir_ && log_now) run_dir_->append_metrics(rec);
    const std::vector<profile::NodeGpu> gpu_now = gpus ? gpus->latest() : std::vector<profile::NodeGpu>{};
    if (outputs && log_now) {
      StepScalars sc{s.step, s.loss, s.lr, s.grad_norm, s.tokens_per_s};
      if (peak_tflops > 0)
        sc.mfu = s.tokens_per_s / comm_.world() * loop_.flops_per_token / (peak_tflops * 1e12);
      sc.memory_bytes = gpu ? model_memory() : double(process_peak_rss_bytes());
      if (!gpu_now.empty() && gpu_now[0].power_w >= 0) {
        sc.power_w = 0;  // the node's GPUs together
        for (const auto& g : gpu_now) sc.power_w += std::max(0.0, g.power_w);
      }
      outputs->step(sc);
    }
    if (lead && show_progress) {
      const std::string gpu_text = gpu_status_text(gpu_now);
      const std::string metric =
          names.empty() ? std::string() : fmt::format(" | {} {:.1f}%", shown(names[0]), 100 * s.metrics[0]);
      const char* unit = loop_.tokens_per_sample > 0 ? "tok/s" : "img/s";
      progress.update(s.step, fmt::format("loss {:.4f}{} | lr {:.2e} | {} {}{}", s.loss, metric,
                                          s.lr, format_count(s.tokens_per_s), unit,
                                          gpu_text.empty() ? "" : " | " + gpu_text));
    }
    r.steps = s.step;
    if (after_step && !after_step(s)) {
      r.stopped = true;
      break;
    }
  }
  if (lead && show_progress) progress.finish();
  end_profile();  // a run stopped inside the window
  Timer val_timer;
  // A vision run stopped early (a signal: the job's time is running out) skips the pass.
  if (!(loop_.eval_always_logged && r.stopped)) r.val = evaluate_all();
  r.val_loss = r.val.loss;
  if (outputs && r.val_loss >= 0) outputs->eval(r.steps, r.val_loss, /*more_steps=*/false);
  if (run_dir_ && loop_.eval_always_logged && r.val.loss >= 0) {
    nlohmann::json rec = {{"step", r.steps}};
    add_eval(rec, r.val, names);
    run_dir_->append_metrics(rec);
  }
  // The final validation pass belongs to the epoch of the last step.
  if (epoch_open) {
    const double val_s = val_timer.seconds();
    epoch.val_s += val_s;
    epoch.wall_s = epoch.complete ? epoch.wall_s + val_s : epoch_wall.seconds();
    step_log.add_epoch(epoch);
    if (outputs) outputs->epoch_stop(epoch.epoch);
  }
  // GPU: the memory the model holds on the device; CPU: the process's peak resident set.
  const double peak_memory = gpu ? model_memory() : double(process_peak_rss_bytes());
  step_log.add_rank_event("memory", {{"peak_memory_bytes", peak_memory},
                                     {"model_memory_bytes", model_memory()}});
  // Every rank's optimizer state (a shard of it with ZeRO-1) and the wrapper that holds it.
  step_log.add_rank_event("optimizer_state",
                          {{"optimizer_state_bytes", double(dp_->optimizer_state_bytes())},
                           {"activation_bytes", double(model_.activation_bytes())}});
  if (meter) {  // every GPU rank adds the event (a collective), measured or not
    const profile::GpuPowerWindow p = meter_started ? meter->stop() : profile::GpuPowerWindow{};
    step_log.add_rank_event("gpu_power", profile::gpu_power_event_fields(p, meter->available() && meter_started));
  }
  step_log.finish();
  r.communication = dp_->describe();
  r.wall_s = wall.seconds();
  r.step_time_median_s = median(step_times);
  r.step_time_p90_s = percentile(step_times, 0.9);
  r.tokens_per_s_median = median(rates);
  if (!bubbles.empty()) r.pipeline_bubble_median = median(bubbles);
  return r;
}

}  // namespace aiscale::train
