#include "aiscale/train/vision_session.h"

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "aiscale/core/error.h"
#include "aiscale/core/fs.h"
#include "aiscale/core/log.h"
#include "aiscale/core/validate.h"
#include "aiscale/nn/models/resnet.h"
#include "aiscale/nn/models/resnet_cuda.h"
#include "aiscale/optim/sgd.h"
#include "aiscale/parallel/comm.h"
#include "aiscale/parallel/rank_failure.h"
#include "aiscale/train/checkpoint.h"
#include "aiscale/train/managed_models.h"
#include "aiscale/train/run_dir.h"
#include "aiscale/train/safetensors.h"
#include "aiscale/train/session.h"
#include "aiscale/train/session_run.h"
#include "aiscale/train/sources.h"
#include "aiscale/train/vision_config.h"
#include "aiscale/train/vision_sources.h"
#include "aiscale/train/trainer.h"
#include "aiscale/train/vision_gpu.h"

namespace aiscale::train {
namespace fs = std::filesystem;
namespace {

std::vector<SafeTensor> named(const std::vector<nn::ResNetTensor>& tensors,
                              const std::vector<float>& flat, const std::string& suffix = "") {
  std::vector<SafeTensor> out;
  for (const nn::ResNetTensor& t : tensors) {
    out.push_back({t.name + suffix, t.shape,
                   std::vector<float>(flat.begin() + t.offset, flat.begin() + t.offset + t.size)});
  }
  return out;
}

// Copies every tensor of `tensors` from `file` into `flat`, refusing a missing or
// mis-shaped one with a message naming both.
void unpack(const std::map<std::string, SafeTensor>& file, const std::string& source,
            const std::vector<nn::ResNetTensor>& tensors, std::vector<float>& flat,
            const std::string& suffix = "") {
  for (const nn::ResNetTensor& t : tensors) {
    auto it = file.find(t.name + suffix);
    if (it == file.end())
      fail("checkpoint '{}' has no tensor '{}': it was written for another model (compare "
           "model.preset and model.num_classes with the run's config.toml)", source,
           t.name + suffix);
    if (it->second.shape != t.shape || int64_t(it->second.data.size()) != t.size)
      fail("checkpoint '{}': tensor '{}' has shape [{}], the model needs [{}]", source,
           t.name + suffix, fmt::join(it->second.shape, ", "), fmt::join(t.shape, ", "));
    std::copy(it->second.data.begin(), it->second.data.end(), flat.begin() + t.offset);
  }
}

void write_vision_checkpoint(const std::string& dir, const VisionTrainConfig& c,
                             nn::ResNet& model, const std::vector<float>& momentum, int64_t step,
                             data::ImageSource::Position data, int world, int64_t keep) {
  std::vector<SafeTensor> weights = named(model.parameter_tensors(), model.params());
  for (SafeTensor& t : named(model.buffer_tensors(), model.buffers())) weights.push_back(t);
  nlohmann::ordered_json state = {{"kind", "resnet"},         {"step", step},
                                  {"data_epoch", data.epoch}, {"data_index", data.index},
                                  {"seed", c.seed},           {"world_size", world},
                                  {"n_params", model.num_parameters()},
                                  {"config_toml", to_toml(c)},
                                  {"aiscale_version", AISCALE_VERSION},
                                  {"written", utc_iso8601()}};
  write_checkpoint_folder(
      dir, step,
      {{"model.safetensors",
        safetensors_serialize(weights, {{"format", "pt"}, {"producer", "aiscale"}})},
       {"optimizer.safetensors",
        safetensors_serialize(named(model.parameter_tensors(), momentum, ".momentum_buffer"))},
       {"state.json", state.dump(2) + "\n"}},
      keep);
}

struct Restored {
  int64_t step = 0;
  data::ImageSource::Position data;
};

Restored read_vision_checkpoint(const std::string& dir, nn::ResNet& model,
                                std::vector<float>& momentum, int world) {
  nlohmann::json state;
  const std::string state_path = (fs::path(dir) / "state.json").string();
  try {
    state = nlohmann::json::parse(read_file(state_path));
  } catch (const nlohmann::json::exception& e) {
    fail("checkpoint '{}': state.json is not valid JSON ({}): resume from another checkpoint "
         "with --checkpoint STEP", dir, e.what());
  }
  if (state.value("kind", std::string()) != "resnet")
    fail("checkpoint '{}' is not a vision (ResNet) checkpoint", dir);
  if (state.value("world_size", 0) != world)
    fail("checkpoint '{}' was written by {} ranks, this run has {}: resume with the same "
         "number of ranks (the data order depends on it)", dir, state.value("world_size", 0),
         world);
  const std::string model_path = (fs::path(dir) / "model.safetensors").string();
  const auto weights = safetensors_parse(read_file(model_path), model_path);
  unpack(weights, model_path, model.parameter_tensors(), model.params());
  unpack(weights, model_path, model.buffer_tensors(), model.buffers());
  const std::string opt_path = (fs::path(dir) / "optimizer.safetensors").string();
  unpack(safetensors_parse(read_file(opt_path), opt_path), opt_path, model.parameter_tensors(),
         momentum, ".momentum_buffer");
  Restored r;
  r.step = state.value("step", int64_t{0});
  r.data = {state.value("data_epoch", int64_t{0}), state.value("data_index", int64_t{0})};
  return r;
}

std::string config_path_of(const TrainRequest& req) {
  if (!req.config_path.empty()) return req.config_path;
  if (!req.resume_dir.empty()) return (fs::path(req.resume_dir) / "config.toml").string();
  return {};
}

}  // namespace

bool is_vision_request(const TrainRequest& req) {
  const std::string path = config_path_of(req);
  if (path.empty() || !fs::is_regular_file(path)) return false;
  return is_vision_config(read_file(path), req.overrides);
}

int run_vision_training(const TrainRequest& req) {
  std::vector<std::string> overrides = req.overrides;
  const std::string config_path = config_path_of(req);
  if (!req.resume_dir.empty()) {
    if (!fs::is_directory(req.resume_dir))
      fail("--resume '{}': no such run directory", req.resume_dir);
    fs::path rd = fs::absolute(req.resume_dir).lexically_normal();
    if (rd.filename().empty()) rd = rd.parent_path();
    overrides.push_back("run.dir=\"" + rd.parent_path().string() + "\"");
    overrides.push_back("run.name=\"" + rd.filename().string() + "\"");
  }
  VisionTrainConfig c;
  try {  // alike on every rank: rank 0 alone says why (parallel/rank_failure.h)
    c = load_vision_config(config_path, overrides);
  } catch (const Error& e) {
    throw parallel::AlikeOnEveryRank(e.what());
  }
  validate::omp_num_threads_env();
  const bool gpu = c.device == "cuda";
  parallel::CommOptions comm_options;
  comm_options.kind = c.communicator;
  comm_options.device = c.device;
  comm_options.timeout_s = c.timeout_s;
  // Held by the caller when it asks (cli/cmd_train.cpp), to report a failure before the
  // communicator goes.
  parallel::RankContext own_context;
  parallel::RankContext& context = req.rank_context ? *req.rank_context : own_context;
  context.comm = parallel::make_communicator(comm_options);
  std::unique_ptr<parallel::Communicator>& comm = context.comm;
  const int rank = comm->rank(), world = comm->world();
  log::set_rank(rank, world);
  const int threads = set_cpu_threads(c.threads);

  auto train_src = open_vision_source(c, true, rank, world);
  auto val_src = open_vision_source(c, false, rank, world);
  if (train_src->batches_per_epoch() < 1)
    fail("{}: the training set ({} images) is smaller than one global batch ({} ranks x {})",
         config_path, train_src->records(), world, c.batch_size);

  nn::ResNetConfig mc = nn::resnet_preset(c.preset);
  mc.in_channels = train_src->channels();
  if (c.blocks_per_stage > 0) std::fill(mc.blocks.begin(), mc.blocks.end(), c.blocks_per_stage);
  if (c.stem_stride > 0) mc.stem_stride = c.stem_stride;
  if (train_src->height() != train_src->width())
    fail("{}: images of {}x{}: the ResNet takes square images (set model.image_size)",
         config_path, train_src->height(), train_src->width());
  mc.image_size = train_src->height();
  mc.num_classes = c.num_classes > 0 ? c.num_classes : train_src->num_classes();
  if (mc.num_classes < train_src->num_classes())
    fail("{}: model.num_classes = {} but the training data has {} classes", config_path,
         mc.num_classes, train_src->num_classes());
  nn::ResNetOptions mo;
  mo.max_batch = gpu ? 0 : c.batch_size;  // a GPU run's host model only mirrors the state
  mo.label_smoothing = float(c.label_smoothing);
  mo.zero_init_residual = c.zero_init_residual;
  mo.seed = c.seed;
  nn::ResNet model(mc, mo, ops::vision::vision_cpu_backend());
  if (c.sync_batchnorm) model.set_batchnorm_sync(comm.get());

  std::vector<uint8_t> decay(model.num_parameters(), 1);
  if (!c.decay_bn_and_bias) {
    for (const nn::ResNetTensor& t : model.parameter_tensors())
      std::fill(decay.begin() + t.offset, decay.begin() + t.offset + t.size, t.decay ? 1 : 0);
  }
  std::unique_ptr<nn::ResNetCuda> gpu_model;
  std::unique_ptr<ResNetCudaModel> gpu_view;
  std::unique_ptr<optim::DataParallel> data_parallel;
  if (gpu) {
    nn::ResNetCudaOptions go;
    go.max_batch = c.batch_size;
    go.precision = c.precision;
    go.tf32 = c.tf32;
    go.batchnorm = c.batchnorm;
    go.workspace_mib = c.cudnn_workspace_mib;
    go.momentum = c.momentum;
    go.nesterov = c.nesterov;
    go.weight_decay = c.weight_decay;
    go.decay_bn_and_bias = c.decay_bn_and_bias;
    go.comm = comm.get();
    go.zero_stage = c.zero_stage;
    go.overlap = c.overlap_allreduce;
    go.timeout_s = c.timeout_s;
    gpu_model = std::make_unique<nn::ResNetCuda>(model, go);
    gpu_view = std::make_unique<ResNetCudaModel>(*gpu_model, model);
    data_parallel = std::make_unique<ResNetCudaManaged>(*gpu_model, model, *comm);
  } else {
    // SGD with momentum outside the model, over the whole model (DDP) or a rank's shard
    // (ZeRO-1); the decay mask is indexed by the model's values either way.
    const optim::SgdOptions so{c.momentum, c.nesterov, c.weight_decay};
    auto sgd = [so, decay](int64_t n) { return std::make_unique<optim::Sgd>(n, so, decay); };
    const optim::HostDataParallelOptions ho;  // average, ZeRO-1 buckets of 25 MiB
    parallel::Communicator* data = world > 1 ? comm.get() : nullptr;
    data_parallel = optim::make_host_data_parallel(c.zero_stage, host_model(model), data, sgd, ho);
  }
  nn::Model& trained = gpu ? static_cast<nn::Model&>(*gpu_view) : model;

  const int64_t per_epoch = train_src->batches_per_epoch();
  const int64_t total_steps =
      c.steps > 0 ? c.steps : std::max<int64_t>(1, int64_t(std::ceil(c.epochs * per_epoch)));
  const int64_t global_batch = c.batch_size * world;
  optim::LrSchedule schedule;
  schedule.peak_lr = c.lr_scaling == "linear"
                         ? optim::linear_scaled_lr(c.lr, global_batch, c.reference_batch)
                         : c.lr;
  schedule.warmup_steps = std::min<int64_t>(int64_t(std::llround(c.warmup_epochs * per_epoch)),
                                            total_steps);
  schedule.total_steps = total_steps;
  schedule.decay = c.schedule;
  schedule.min_lr = schedule.peak_lr * c.min_lr_ratio;
  schedule.step_every = std::max<int64_t>(1, int64_t(std::llround(c.step_epochs * per_epoch)));
  schedule.gamma = c.step_gamma;

  // The momentum as whole tensors for a checkpoint: gathered from the shards with ZeRO-1
  // (every rank takes part), downloaded from a GPU with the host mirror.
  std::vector<float> momentum(size_t(model.num_parameters()), 0.0f);
  auto gather_state = [&] {
    if (gpu_model) gpu_model->download(model, &momentum);
    else data_parallel->get_state(0, momentum.data());
  };

  const std::string name =
      c.run_name.empty() ? fmt::format("{}-{}", c.preset, utc_compact()) : c.run_name;
  const bool resuming = !req.resume_dir.empty();
  const std::string ckpt_dir = (fs::path(c.run_dir) / name / "checkpoints").string();
  int64_t start_step = 0;
  if (resuming) {
    std::optional<std::string> dir = latest_checkpoint(ckpt_dir);
    if (req.checkpoint_step >= 0) {
      const fs::path wanted = fs::path(ckpt_dir) / checkpoint_name(req.checkpoint_step);
      if (!fs::exists(wanted / "COMPLETE"))
        fail("--checkpoint {}: '{}' is not a complete checkpoint", req.checkpoint_step,
             wanted.string());
      dir = wanted.string();
    }
    if (!dir) fail("--resume '{}': no complete checkpoint in '{}'", req.resume_dir, ckpt_dir);
    const Restored r = read_vision_checkpoint(*dir, model, momentum, world);
    if (gpu_model) gpu_model->upload(model, &momentum);
    else data_parallel->set_state(0, momentum.data());
    start_step = r.step;
    train_src->restore(r.data);
    // Before the run directory opens metrics.jsonl for appending.
    if (rank == 0) truncate_metrics((fs::path(c.run_dir) / name).string(), start_step);
    log::info("resuming from {} (step {})", *dir, start_step);
  }
  RunDirectory run_dir(c.run_dir, name, resuming, rank == 0);
  context.run_dir = run_dir.path();
  run_dir.write_config(to_toml(c));
  if (rank == 0) {
    const std::string where =
        gpu ? fmt::format("on the GPU ({})", gpu_model->describe())
            : fmt::format("on the CPU ({} threads, {})", threads, data_parallel->name());
    log::info("aiscale train: {} ({:.2f}M parameters, {}x{}x{} images, {} classes) {} x {} "
              "ranks; global batch {}, peak lr {:.4g}, {} steps ({} per epoch)",
              c.preset, double(model.num_parameters()) / 1e6, mc.in_channels, mc.image_size,
              mc.image_size, mc.num_classes, where, world, global_batch, schedule.peak_lr,
              total_steps, per_epoch);
  }

  const FaultPlan fault = fault_plan_from_env();
  // SIGTERM/SIGINT (Slurm preemption, Ctrl-C), as for GPT runs: the step in progress
  // finishes, the ranks agree to stop, a checkpoint is written and the run exits cleanly.
  session::install_stop_signals();

  // The one training loop, with what is a vision run's own: its schedule in epochs, a
  // validation pass at each epoch's end, the accuracy metrics and images/s.
  LoopConfig loop;
  loop.steps = total_steps;
  loop.data_world = world;
  loop.lr = [schedule](int64_t step) { return optim::scheduled_lr(schedule, step); };
  loop.log_every = c.log_every;
  loop.eval_every = c.eval_every;
  loop.eval_each_epoch = true;
  loop.eval_batches = c.eval_batches;
  loop.eval_always_logged = true;
  loop.device = c.device;
  loop.rate_name = "images";
  loop.record_epoch = true;
  ImageFeed train_feed(*train_src);
  std::unique_ptr<ImageFeed> val_feed;
  if (val_src) val_feed = std::make_unique<ImageFeed>(*val_src);
  Trainer trainer(loop, trained, *data_parallel, train_feed, val_feed.get(), *comm, &run_dir);
  trainer.show_progress = !req.quiet;
  int64_t last_saved = start_step;
  bool stopped_by_signal = false;
  bool abandoned = false;  // SIGUSR1: stopped without a checkpoint
  auto save = [&](int64_t step) {
    gather_state();  // a collective with ZeRO-1
    if (rank == 0)
      write_vision_checkpoint(ckpt_dir, c, model, momentum, step, train_src->position(), world,
                              c.keep_checkpoints);
    last_saved = step;
  };
  trainer.after_step = [&](const StepStats& s) {
    if (!std::isfinite(s.loss))
      fail("step {}: the loss is {}: lower train.lr (peak {:.4g}) or raise train.warmup_epochs",
           s.step, s.loss, schedule.peak_lr);
    if (s.step == fault.term_step) session::signal_stop();
    // Ranks must agree on stopping, or the others would wait in the next all-reduce.
    double stop[2] = {session::stop_signalled() ? 1.0 : 0.0, session::abandon_signalled() ? 1.0 : 0.0};
    if (world > 1) comm->allreduce_sum(stop, 2);
    if (stop[0] > 0) {
      stopped_by_signal = true;
      abandoned = stop[1] > 0;
      return false;  // the checkpoint follows the loop (written aside, then renamed), unless SIGUSR1
    }
    if (c.checkpoint_every > 0 && s.step % c.checkpoint_every == 0 && s.step < total_steps)
      save(s.step);
    return true;
  };
  session::wait_for_start_gate();
  const TrainResult r = trainer.run(start_step);
  // Training images taken from the next record because theirs was corrupt
  // (data.skip_corrupt = true), over all ranks: the set trained on differs by this much.
  double skipped_train = double(train_src->stats().skipped_corrupt);
  if (world > 1) comm->allreduce_sum(&skipped_train, 1);
  if (r.steps > last_saved && !abandoned) save(r.steps);
  nlohmann::json summary = {{"kind", "resnet"},
                            {"status", abandoned ? "stopped" : stopped_by_signal ? "interrupted" : "finished"},
                            {"model", c.preset},
                            {"device", c.device},
                            {"precision", c.precision},
                            {"parameters", model.num_parameters()},
                            {"world_size", world},
                            {"global_batch", global_batch},
                            {"peak_lr", schedule.peak_lr},
                            {"steps", r.steps},
                            {"first_loss", r.first_loss},
                            {"final_loss", r.final_loss},
                            {"train_top1", r.window_metrics.empty() ? 0.0 : r.window_metrics[0]},
                            {"images_per_s_median", r.tokens_per_s_median},
                            {"step_time_median_s", r.step_time_median_s},
                            {"wall_s", r.wall_s},
                            {"skipped_corrupt", {{"train", int64_t(skipped_train)},
                                                 {"val", r.val.skipped_corrupt}}},
                            {"communication", r.communication}};
  if (r.val.loss >= 0) {
    summary["val_loss"] = r.val.loss;
    summary["val_top1"] = r.val.metrics[0];
    summary["val_top5"] = r.val.metrics[1];
    summary["val_images"] = r.val.samples;
  }
  run_dir.write_summary(summary);
  if (rank == 0 && abandoned) {
    std::printf("stopped by SIGUSR1 after step %lld, without a checkpoint\n", static_cast<long long>(r.steps));
    std::fflush(stdout);
  } else if (rank == 0 && stopped_by_signal) {
    std::printf("stopped by signal after step %lld; checkpoint written. Resume with:\n"
                "  aiscale train --resume %s\n", static_cast<long long>(r.steps),
                run_dir.path().c_str());
    std::fflush(stdout);
  }
  if (rank == 0 && (skipped_train > 0 || r.val.skipped_corrupt > 0))
    log::warn("{} training image(s) and {} image(s) of the last validation pass were taken from "
              "the next record because theirs was corrupt (data.skip_corrupt = true); the counts "
              "are in summary.json (skipped_corrupt). Re-pack the store to train on all of it",
              int64_t(skipped_train), r.val.skipped_corrupt);
  if (rank == 0) {
    log::info("done: {} steps, loss {:.4f} -> {:.4f}{}, {:.0f} images/s, run directory {}",
              r.steps, r.first_loss, r.final_loss,
              r.val.loss >= 0 ? fmt::format(", val top-1 {:.2f}% top-5 {:.2f}%",
                                            100 * r.val.metrics[0], 100 * r.val.metrics[1])
                              : std::string(),
              r.tokens_per_s_median, run_dir.path());
  }
  return 0;
}

}  // namespace aiscale::train
