#include "aiscale/train/session.h"

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "aiscale/core/env.h"
#include "aiscale/core/error.h"
#include "aiscale/core/fs.h"
#include "aiscale/core/log.h"
#include "aiscale/nn/models/gpt.h"
#include "aiscale/parallel/comm.h"
#include "aiscale/parallel/watchdog.h"
#include "aiscale/train/checkpoint.h"
#include "aiscale/train/config.h"
#include "aiscale/train/progress.h"
#include "aiscale/train/run_dir.h"
#include "aiscale/train/sources.h"
#include "aiscale/train/trainer.h"

namespace aiscale::train {
namespace fs = std::filesystem;
namespace {

// Set by SIGTERM/SIGINT (Slurm preemption, Ctrl-C). A signal handler can only touch
// process-wide state, so this flag is the one exception to "no globals" besides the logger.
volatile std::sig_atomic_t g_stop_signal = 0;
extern "C" void on_stop_signal(int sig) { g_stop_signal = sig; }

// Keep the metrics of steps up to `step` (a resumed run rewrites what came after).
void truncate_metrics(const std::string& run_dir, int64_t step) {
  const std::string path = (fs::path(run_dir) / "metrics.jsonl").string();
  if (!fs::exists(path)) return;
  std::ifstream in(path);
  std::string line, kept;
  while (std::getline(in, line)) {
    try {
      auto j = nlohmann::json::parse(line);
      if (j.value("step", int64_t{0}) <= step) kept += line + "\n";
    } catch (const nlohmann::json::exception&) {
      // a line cut by a crash: drop it
    }
  }
  atomic_write_file(path, kept);
}

CheckpointState snapshot(const TrainConfig& c, nn::GptModel& model, const BatchSource& data,
                         int64_t step, int world, int64_t nonfinite) {
  CheckpointState s;
  s.model = c.model;
  s.step = step;
  s.data = data.position();
  s.seed = c.seed;
  s.world_size = world;
  s.nonfinite_steps = nonfinite;
  s.config_toml = to_toml(c);
  const size_t n = static_cast<size_t>(model.num_params());
  s.params.resize(n);
  s.m.resize(n);
  s.v.resize(n);
  model.get_params(s.params.data());
  model.get_optimizer_state(s.m.data(), s.v.data());
  return s;
}

}  // namespace

FaultPlan fault_plan_from_env() {
  FaultPlan f;
  const std::string s = env::get("AISCALE_FAULT");
  if (s.empty()) return f;
  long long step = 0;
  int rank = 0;
  if (std::sscanf(s.c_str(), "nan@%lld", &step) == 1) f.nan_step = step;
  else if (std::sscanf(s.c_str(), "kill@%lld:%d", &step, &rank) == 2) f.kill_step = step, f.kill_rank = rank;
  else if (std::sscanf(s.c_str(), "term@%lld", &step) == 1) f.term_step = step;
  else if (std::sscanf(s.c_str(), "slow@%d:%lf", &rank, &f.slow_ms) == 2 && f.slow_ms >= 0) f.slow_rank = rank;
  else fail("AISCALE_FAULT='{}' is not understood: use nan@STEP, kill@STEP:RANK, term@STEP or slow@RANK:MS", s);
  return f;
}

int run_training(const TrainRequest& req) {
  std::vector<std::string> overrides = req.overrides;
  std::string config_path = req.config_path;
  std::optional<CheckpointState> resume;
  if (!req.resume_dir.empty()) {
    if (!fs::is_directory(req.resume_dir))
      fail("--resume '{}': no such run directory", req.resume_dir);
    if (config_path.empty()) config_path = (fs::path(req.resume_dir) / "config.toml").string();
    auto latest = latest_checkpoint((fs::path(req.resume_dir) / "checkpoints").string());
    if (!latest)
      fail("--resume '{}': the run has no complete checkpoint yet; start it again without --resume "
           "(or set run.checkpoint_every)", req.resume_dir);
    resume = read_checkpoint(*latest, /*with_optimizer=*/true);
    // The run directory stays where it is.
    fs::path rd = fs::absolute(req.resume_dir).lexically_normal();
    if (rd.filename().empty()) rd = rd.parent_path();
    overrides.push_back("run.dir=\"" + rd.parent_path().string() + "\"");
    overrides.push_back("run.name=\"" + rd.filename().string() + "\"");
  }
  if (config_path.empty()) fail("no config: pass --config FILE (or --resume RUN_DIR)");
  TrainConfig c = load_train_config(config_path, overrides);
  const FaultPlan fault = fault_plan_from_env();

  // Before the model: a GPU rank's communicator also selects the rank's GPU.
  parallel::CommOptions co;
  co.kind = c.communicator;
  co.device = c.device;
  co.rendezvous = c.rendezvous;
  co.timeout_s = c.timeout_s;
  std::unique_ptr<parallel::Communicator> comm = parallel::make_communicator(co);
  if (comm->world() > 1) {
    // NCCL bounds its own waits by timeout_s and then aborts the communicator, which ends
    // its kernels and fails with a message naming the call; the watchdog stays behind it
    // as the last resort.
    const double watchdog_s = comm->on_device() ? c.timeout_s + 30 : c.timeout_s;
    comm = parallel::with_watchdog(std::move(comm), watchdog_s);
  }
  const int rank = comm->rank(), world = comm->world();
  log::set_rank(rank, world);
  const int threads = set_cpu_threads(c.threads);
  if (c.train_data.empty())
    fail("{}: data.train is not set: tokenize text with `aiscale data tokenize` and point "
         "data.train at the shards (see configs/quickstart.toml)", config_path);

  auto train_src = make_shard_source(c.train_data, c.batch_size, c.seq_len, rank, world, c.seed,
                                     /*shuffle=*/true, c.model.vocab_size);
  std::unique_ptr<BatchSource> val_src;
  if (!c.val_data.empty())
    val_src = make_shard_source(c.val_data, c.batch_size, c.seq_len, rank, world, c.seed,
                                /*shuffle=*/false, c.model.vocab_size);

  nn::GptRunOptions ro;
  ro.batch = c.batch_size;
  ro.seq = c.seq_len;
  ro.precision = parse_dtype(c.precision);
  ro.recompute = c.recompute;
  ro.decay_embeddings = c.decay_embeddings;
  ro.seed = c.seed;
  ro.comm = world > 1 ? comm.get() : nullptr;
  ro.zero_stage = static_cast<int>(c.zero_stage);
  ro.overlap = c.overlap;
  ro.bucket_mib = c.bucket_mib;
  ro.grad_comm = parse_dtype(c.grad_comm);
  ro.grad_transport = c.grad_transport;
  ro.attention = c.attention;
  ro.comm_timeout_s = c.timeout_s;
  auto model = nn::make_gpt(c.device, c.model, ro);

  int64_t start_step = 0, nonfinite = 0;
  if (resume) {
    const auto& r = *resume;
    if (r.model.num_params() != c.model.num_params() || r.model.n_layer != c.model.n_layer ||
        r.model.n_embd != c.model.n_embd)
      fail("checkpoint in '{}' is of another model shape than the config: resume with the run's "
           "own config.toml", req.resume_dir);
    if (r.world_size != world)
      fail("checkpoint in '{}' was written by {} rank(s), this job has {}: resume with the same "
           "number of ranks (the data order depends on it)", req.resume_dir, r.world_size, world);
    if (r.step >= c.steps)
      fail("run '{}' already reached step {} of train.steps = {}: raise it with --set "
           "train.steps=N to train further", req.resume_dir, r.step, c.steps);
    model->set_params(r.params.data());
    model->set_optimizer_state(r.m.data(), r.v.data());
    train_src->restore(r.data);
    start_step = r.step;
    nonfinite = r.nonfinite_steps;
    if (rank == 0) truncate_metrics(req.resume_dir, r.step);
  } else if (world > 1) {
    // DDP semantics: every rank starts from rank 0's weights.
    if (c.device == "cuda") {
      // The GPU model keeps a working (bf16/fp16) copy beside its fp32 master weights:
      // set_params refreshes both. Once per run, through host memory.
      std::vector<float> params(static_cast<size_t>(model->num_params()));
      model->get_params(params.data());
      comm->broadcast(params.data(), model->num_params(), 0);
      model->set_params(params.data());
    } else {
      comm->broadcast(model->param_buffer(), model->num_params(), 0);
    }
  }

  std::string name = c.run_name.empty() ? fmt::format("{}-{}", c.model_preset, utc_compact()) : c.run_name;
  if (world > 1) {  // every rank must agree on the generated name: rank 0's wins
    char buf[256] = {};
    if (rank == 0) std::snprintf(buf, sizeof buf, "%s", name.c_str());
    comm->broadcast_bytes(buf, sizeof buf, 0);
    name = buf;
  }
  RunDirectory run_dir(c.run_dir, name, /*resume=*/resume.has_value(), rank == 0);
  run_dir.write_config(to_toml(c));
  const std::string ckpt_dir = (fs::path(run_dir.path()) / "checkpoints").string();
  std::unique_ptr<AsyncCheckpointer> checkpointer;
  if (rank == 0) checkpointer = std::make_unique<AsyncCheckpointer>(ckpt_dir, c.keep_checkpoints);

  if (rank == 0)
    log::info("aiscale train: {} ({:.2f}M parameters: L={} H={} C={} V={}) on {} ({} threads), "
              "{} rank(s) [{}]; global batch {} x {} tokens = {} tokens/step; data: {}{}",
              c.model_preset, model->num_params() / 1e6, c.model.n_layer, c.model.n_head,
              c.model.n_embd, c.model.vocab_size, model->device_name(), threads, world,
              comm->backend(), c.batch_size * c.grad_accum * world, c.seq_len,
              c.tokens_per_step(world), train_src->describe(),
              resume ? fmt::format("; resuming at step {}", start_step) : "");

  g_stop_signal = 0;
  std::signal(SIGTERM, on_stop_signal);
  std::signal(SIGINT, on_stop_signal);

  Trainer trainer(c, *model, *train_src, val_src.get(), *comm, &run_dir);
  trainer.show_progress = !req.quiet;
  trainer.before_update = [&](int64_t step_index) {
    if (step_index + 1 != fault.nan_step) return;
    if (c.device == "cuda") {  // device memory: poison through the host copy
      std::vector<float> grads(static_cast<size_t>(model->num_params()));
      model->get_grads(grads.data());
      grads[0] = std::numeric_limits<float>::quiet_NaN();
      model->set_grads(grads.data());
    } else {
      model->grad_buffer()[0] = std::numeric_limits<float>::quiet_NaN();
    }
  };
  if (fault.slow_rank == rank)
    trainer.before_backward = [&](int64_t) {
      std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(fault.slow_ms));
    };
  bool stopped_by_signal = false;
  int64_t last_checkpoint = start_step;
  // Rank 0 writes; with sharded (ZeRO-1) state every rank takes part in gathering it.
  auto save_checkpoint = [&](int64_t step) {
    if (rank == 0) checkpointer->save(snapshot(c, *model, *train_src, step, world, nonfinite));
    else if (model->collective_state()) snapshot(c, *model, *train_src, step, world, nonfinite);
  };
  trainer.after_step = [&](const StepStats& s) {
    if (!std::isfinite(s.loss) || !std::isfinite(s.grad_norm)) {
      ++nonfinite;
      if (nonfinite > c.max_nonfinite_steps)
        fail("{} steps had a NaN/Inf loss or gradient (last at step {}), more than "
             "train.max_nonfinite_steps = {}: lower train.lr, check the data, or raise the limit",
             nonfinite, s.step, c.max_nonfinite_steps);
    }
    if (s.step == fault.kill_step && rank == fault.kill_rank) std::raise(SIGKILL);
    if (s.step == fault.term_step) g_stop_signal = SIGTERM;
    // Ranks must agree on stopping, or the others would wait in the next all-reduce.
    double stop = g_stop_signal != 0 ? 1.0 : 0.0;
    if (world > 1) comm->allreduce_sum(&stop, 1);
    if (stop > 0) {
      stopped_by_signal = true;
      return false;
    }
    if (c.checkpoint_every > 0 && s.step % c.checkpoint_every == 0 && s.step < c.steps) {
      save_checkpoint(s.step);
      last_checkpoint = s.step;
    }
    return true;
  };
  TrainResult r = trainer.run(start_step);

  // Final checkpoint (also on a signal), written before the summary marks the run done.
  if (r.steps != last_checkpoint) save_checkpoint(r.steps);
  if (rank == 0) checkpointer->wait();
  nlohmann::json summary = {
      {"status", stopped_by_signal ? "interrupted" : "finished"},
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
      {"nonfinite_steps", nonfinite},
      {"checkpoint", (fs::path(ckpt_dir) / checkpoint_name(r.steps)).string()},
      {"finished", utc_iso8601()}};
  if (r.val_loss >= 0) summary["val_loss"] = r.val_loss;
  run_dir.write_summary(summary);
  if (rank == 0) {
    if (stopped_by_signal)
      std::printf("stopped by signal after step %lld; checkpoint written. Resume with:\n"
                  "  aiscale train --resume %s\n", static_cast<long long>(r.steps),
                  run_dir.path().c_str());
    std::printf("trained %lld steps in %s: loss %.4f -> %.4f%s, %s tokens/s (median)\n",
                static_cast<long long>(r.steps - start_step), format_duration(r.wall_s).c_str(),
                r.first_loss, r.final_loss,
                r.val_loss >= 0 ? fmt::format(", validation loss {:.4f}", r.val_loss).c_str() : "",
                format_count(r.tokens_per_s_median).c_str());
    std::printf("run directory: %s\n", run_dir.path().c_str());
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace aiscale::train
