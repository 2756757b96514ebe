// aiscale train: train a GPT model from a TOML config.
#include <cstdio>
#include <filesystem>
#include <memory>

#include <fmt/format.h>

#include "aiscale/cli/commands.h"
#include "aiscale/core/error.h"
#include "aiscale/core/fs.h"
#include "aiscale/core/log.h"
#include "aiscale/nn/models/gpt.h"
#include "aiscale/parallel/comm.h"
#include "aiscale/train/config.h"
#include "aiscale/train/progress.h"
#include "aiscale/train/run_dir.h"
#include "aiscale/train/sources.h"
#include "aiscale/train/trainer.h"

namespace aiscale::cli {
namespace {

struct TrainArgs {
  std::string config_path;
  std::vector<std::string> overrides;
  bool quiet = false;
};

void run_train(const TrainArgs& a) {
  train::TrainConfig c = train::load_train_config(a.config_path, a.overrides);
  auto comm = parallel::make_single_process();
  const int rank = comm->rank(), world = comm->world();
  int threads = train::set_cpu_threads(c.threads);
  if (c.train_data.empty())
    fail("{}: data.train is not set: tokenize text with `aiscale data tokenize` and point "
         "data.train at the shards (see configs/quickstart.toml)", a.config_path);

  auto train_src = train::make_shard_source(c.train_data, c.batch_size, c.seq_len, rank, world,
                                            c.seed, /*shuffle=*/true, c.model.vocab_size);
  std::unique_ptr<train::BatchSource> val_src;
  if (!c.val_data.empty())
    val_src = train::make_shard_source(c.val_data, c.batch_size, c.seq_len, rank, world, c.seed,
                                       /*shuffle=*/false, c.model.vocab_size);

  nn::GptRunOptions ro;
  ro.batch = c.batch_size;
  ro.seq = c.seq_len;
  ro.precision = parse_dtype(c.precision);
  ro.recompute = c.recompute;
  ro.decay_embeddings = c.decay_embeddings;
  ro.seed = c.seed;
  auto model = c.device == "cuda" ? nn::make_gpt_cuda(c.model, ro) : nn::make_gpt_cpu(c.model, ro);

  std::string name = c.run_name.empty() ? fmt::format("{}-{}", c.model_preset, utc_compact()) : c.run_name;
  train::RunDirectory run_dir(c.run_dir, name, /*resume=*/false, rank == 0);
  run_dir.write_config(train::to_toml(c));

  if (rank == 0)
    log::info("aiscale train: {} ({:.2f}M parameters: L={} H={} C={} V={}) on {} ({} threads), "
              "{} rank(s); global batch {} x {} tokens = {} tokens/step; data: {}",
              c.model_preset, model->num_params() / 1e6, c.model.n_layer, c.model.n_head,
              c.model.n_embd, c.model.vocab_size, model->device_name(), threads, world,
              c.batch_size * c.grad_accum * world, c.seq_len, c.tokens_per_step(world),
              train_src->describe());
  train::Trainer trainer(c, *model, *train_src, val_src.get(), *comm, &run_dir);
  trainer.show_progress = !a.quiet;
  train::TrainResult r = trainer.run();

  nlohmann::json summary = {
      {"steps", r.steps},
      {"first_loss", r.first_loss},
      {"final_loss", r.final_loss},
      {"tokens_per_s_median", r.tokens_per_s_median},
      {"step_time_median_s", r.step_time_median_s},
      {"step_time_p90_s", r.step_time_p90_s},
      {"wall_s", r.wall_s},
      {"tokens_trained", static_cast<double>(c.tokens_per_step(world)) * r.steps},
      {"n_params", model->num_params()},
      {"device", model->device_name()},
      {"world_size", world},
      {"finished", utc_iso8601()}};
  if (r.val_loss >= 0) summary["val_loss"] = r.val_loss;
  run_dir.write_summary(summary);
  if (rank == 0) {
    std::printf("trained %lld steps in %s: loss %.4f -> %.4f%s, %s tokens/s (median)\n",
                static_cast<long long>(r.steps), train::format_duration(r.wall_s).c_str(),
                r.first_loss, r.final_loss,
                r.val_loss >= 0 ? fmt::format(", validation loss {:.4f}", r.val_loss).c_str() : "",
                train::format_count(r.tokens_per_s_median).c_str());
    std::printf("run directory: %s\n", run_dir.path().c_str());
  }
}

}  // namespace

void add_train_command(CLI::App& app) {
  auto args = std::make_shared<TrainArgs>();
  auto* cmd = app.add_subcommand("train", "Train a GPT model from a TOML config; writes a run "
                                          "directory with config.toml, metrics.jsonl, summary.json");
  cmd->add_option("--config,-c", args->config_path, "TOML run configuration (see configs/)")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--set,-s", args->overrides,
                  "override a config key: --set train.steps=50 (repeatable)")
      ->take_all();
  cmd->add_flag("--quiet,-q", args->quiet, "no progress line");
  cmd->footer("Config keys (section.key, type, meaning):\n" + train::config_reference());
  cmd->callback([args] { run_train(*args); });
}

}  // namespace aiscale::cli
