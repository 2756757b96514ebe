#include "aiscale/train/metrics_outputs.h"

#include <filesystem>

#include <fmt/format.h>

namespace aiscale::train {

MetricsOutputs::MetricsOutputs(const TrainConfig& c, const std::string& run_dir, int world,
                               bool resumed)
    : c_(c), world_(world), samples_per_step_(c.batch_size * c.grad_accum * world) {
  (void)resumed;
  if (c.tensorboard) tb_ = std::make_unique<TfEventsWriter>((std::filesystem::path(run_dir) / "tensorboard").string());
  if (c.mllog) {
    ml_ = std::make_unique<MlLog>((std::filesystem::path(run_dir) / "mllog.txt").string());
    ml_->point("cache_clear", false);  // page caches are left as they are
    ml_->start("init_start");
  }
}

void MetricsOutputs::run_start(int64_t start_step) {
  if (!ml_) return;
  ml_->point("submission_benchmark", "gpt");
  ml_->point("submission_org", "aiscale");
  ml_->point("submission_division", "open");
  ml_->point("submission_status", "research");
  ml_->point("submission_platform", fmt::format("{} x {}", world_, c_.device));
  ml_->point("seed", c_.seed);
  ml_->point("global_batch_size", samples_per_step_);
  ml_->point("gradient_accumulation_steps", c_.grad_accum);
  ml_->point("max_sequence_length", c_.seq_len);
  ml_->point("opt_name", "adamw");
  ml_->point("opt_base_learning_rate", c_.lr);
  ml_->point("opt_end_learning_rate", c_.lr * c_.min_lr_ratio);
  ml_->point("opt_learning_rate_warmup_steps", c_.warmup_steps);
  ml_->point("opt_learning_rate_decay_schedule", c_.schedule);
  ml_->point("opt_learning_rate_training_steps", c_.steps);
  ml_->point("opt_adamw_beta_1", c_.beta1);
  ml_->point("opt_adamw_beta_2", c_.beta2);
  ml_->point("opt_adamw_epsilon", c_.eps);
  ml_->point("opt_adamw_weight_decay", c_.weight_decay);
  ml_->point("opt_gradient_clip_norm", c_.grad_clip);
  ml_->point("train_samples", samples_per_step_ * c_.steps);
  ml_->point("eval_samples", c_.val_data.empty() ? 0 : c_.batch_size * c_.eval_batches * world_);
  ml_->end("init_stop");
  ml_->start("run_start", {{"start_step", start_step}});
  ml_->start("block_start", {{"first_step_num", start_step + 1}, {"epoch_count", 1}});
  block_open_ = true;
}

void MetricsOutputs::step(const StepScalars& s) {
  if (tb_) {
    std::vector<std::pair<std::string, float>> v = {
        {"train/loss", float(s.loss)},
        {"train/lr", float(s.lr)},
        {"train/grad_norm", float(s.grad_norm)},
        {"perf/tokens_per_s", float(s.tokens_per_s)}};
    if (s.mfu >= 0) v.emplace_back("perf/mfu", float(s.mfu));
    if (s.memory_bytes >= 0) v.emplace_back("system/memory_gib", float(s.memory_bytes / 1073741824.0));
    if (s.power_w >= 0) v.emplace_back("system/gpu_power_w", float(s.power_w));
    tb_->scalars(s.step, v);
  }
  if (ml_)
    ml_->point("train_loss", s.loss, {{"step_num", s.step}, {"samples_count", s.step * samples_per_step_}});
}

void MetricsOutputs::eval(int64_t step, double val_loss, bool more_steps) {
  if (tb_) tb_->scalars(step, {{"val/loss", float(val_loss)}});
  if (!ml_) return;
  const nlohmann::json at = {{"step_num", step}, {"samples_count", step * samples_per_step_}};
  if (block_open_) ml_->end("block_stop", at);
  block_open_ = false;
  ml_->start("eval_start", at);
  // As MLPerf's GPT-3 benchmark does: eval_accuracy is the validation loss (log perplexity).
  nlohmann::json m = at;
  m["metric"] = "validation cross-entropy loss (nats per token)";
  ml_->point("eval_accuracy", val_loss, m);
  ml_->end("eval_stop", at);
  if (more_steps) {
    ml_->start("block_start", {{"first_step_num", step + 1}, {"epoch_count", 1}});
    block_open_ = true;
  }
}

void MetricsOutputs::epoch_start(int64_t epoch) {
  if (ml_) ml_->start("epoch_start", {{"epoch_num", epoch}});
}

void MetricsOutputs::epoch_stop(int64_t epoch) {
  if (ml_) ml_->end("epoch_stop", {{"epoch_num", epoch}});
}

void MetricsOutputs::run_stop(int64_t step, const std::string& status) {
  if (!ml_) return;
  if (block_open_) ml_->end("block_stop", {{"step_num", step}, {"samples_count", step * samples_per_step_}});
  block_open_ = false;
  ml_->end("run_stop", {{"status", status}, {"step_num", step}});
}

}  // namespace aiscale::train
