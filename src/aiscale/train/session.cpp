#include "aiscale/train/session.h"
#include "aiscale/train/session_run.h"

#include <algorithm>
#include <chrono>
#include <cmath>
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
#include "aiscale/core/validate.h"
#include "aiscale/core/log.h"
#include "aiscale/nn/models/gpt.h"
#include "aiscale/parallel/comm.h"
#include "aiscale/parallel/process_groups.h"
#include "aiscale/parallel/rank_failure.h"
#include "aiscale/parallel/watchdog.h"
#include "aiscale/profile/op_profiler.h"
#include "aiscale/train/checkpoint.h"
#include "aiscale/train/checkpoint_check.h"
#include "aiscale/train/checkpoint_stream.h"
#include "aiscale/train/config.h"
#include "aiscale/train/divergence.h"
#include "aiscale/train/param_server_session.h"
#include "aiscale/train/parallel_layout.h"
#include "aiscale/train/environment.h"
#include "aiscale/train/hf_checkpoint.h"
#include "aiscale/train/managed_models.h"
#include "aiscale/train/metrics_outputs.h"
#include "aiscale/train/model_options.h"
#include "aiscale/train/profile_report.h"
#include "aiscale/train/progress.h"
#include "aiscale/train/rank_agreement.h"
#include "aiscale/train/resume_layout.h"
#include "aiscale/train/run_dir.h"
#include "aiscale/train/sources.h"
#include "aiscale/train/trainer.h"
#include "aiscale/train/vision_session.h"

namespace aiscale::train {
namespace fs = std::filesystem;

namespace session {
namespace {

// Set by SIGTERM/SIGINT (Slurm preemption, Ctrl-C) and SIGUSR1 (stop without a checkpoint). A signal handler can only touch
// process-wide state, so this flag is the one exception to "no globals" besides the logger.
volatile std::sig_atomic_t g_stop_signal = 0;
extern "C" void on_stop_signal(int sig) { g_stop_signal = sig; }

}  // namespace

void install_stop_signals() {
  g_stop_signal = 0;
  std::signal(SIGTERM, on_stop_signal);
  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGUSR1, on_stop_signal);
}
bool stop_signalled() { return g_stop_signal != 0; }

void wait_for_start_gate() {
  if (!env::is_set("AISCALE_START_GATE")) return;
  const std::string gate = env::get("AISCALE_START_GATE");
  while (!std::filesystem::exists(gate) && !stop_signalled())
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
}
bool abandon_signalled() { return g_stop_signal == SIGUSR1; }
void signal_stop() { g_stop_signal = SIGTERM; }

}  // namespace session

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

namespace {

using session::GptRun;
using session::ResumePoint;

std::string available_steps(const std::vector<std::string>& complete) {
  std::string out;
  for (const auto& d : complete) {
    const std::string name = fs::path(d).filename().string();
    out += (out.empty() ? "" : ", ") + std::to_string(std::stoll(name.substr(5)));
  }
  return out.empty() ? "none" : out;
}

// The checkpoint a resumed run continues from: the one named by --checkpoint, else the
// newest complete one; a corrupt newest one is reported and, with --resume-fallback,
// passed over for the newest good one (the corrupt folders are returned to be set aside).

ResumePoint choose_resume_point(const TrainRequest& req, const nn::GptConfig& model) {
  const std::string root = (fs::path(req.resume_dir) / "checkpoints").string();
  const std::vector<std::string> complete = complete_checkpoints(root);
  ResumePoint p;
  if (req.checkpoint_step >= 0) {
    p.dir = (fs::path(root) / checkpoint_name(req.checkpoint_step)).string();
    if (std::find(complete.begin(), complete.end(), p.dir) == complete.end())
      fail("--checkpoint {}: run '{}' has no complete checkpoint of step {}; complete ones: {}",
           req.checkpoint_step, req.resume_dir, req.checkpoint_step, available_steps(complete));
    p.reader = std::make_shared<CheckpointReader>(p.dir, /*with_optimizer=*/true, &model);
    p.state = p.reader->state();
    return p;
  }
  if (complete.empty())
    fail("--resume '{}': the run has no complete checkpoint yet; start it again without --resume "
         "(or set run.checkpoint_every)", req.resume_dir);
  auto pass_over = [&](const std::string& dir, const Error& e) {
    if (!req.resume_fallback)
      fail("the newest checkpoint cannot be used: {}. Resume from the newest good one with "
           "--resume-fallback, or choose one with --checkpoint STEP (complete: {})", e.what(),
           available_steps(complete));
    log::warn("checkpoint '{}' is corrupt, passed over (--resume-fallback): {}", dir, e.what());
    p.corrupt.push_back(dir);
  };
  for (auto it = complete.rbegin(); it != complete.rend(); ++it) {
    nn::GptConfig found;
    try {
      found = read_checkpoint_model(*it);
    } catch (const Error& e) {
      pass_over(*it, e);
      continue;
    }
    // Another model shape is the config's fault, not the checkpoint's: never passed over.
    check_checkpoint_model(found, model, *it);
    try {
      p.reader = std::make_shared<CheckpointReader>(*it, /*with_optimizer=*/true, &model);
      p.state = p.reader->state();
      p.dir = *it;
      return p;
    } catch (const Error& e) {
      pass_over(*it, e);
    }
  }
  fail("--resume '{}': none of its checkpoints ({}) can be read; start the run again",
       req.resume_dir, available_steps(complete));
}

// What every rank must agree on before step 1.
int64_t resume_step_of(const std::optional<ResumePoint>& r) { return r ? r->state.step : 0; }

// Stage 1, before any communicator: the config (and the resumed run's), the layout the
// launcher's rank count allows, the fault plan, the checkpoint to resume from. What the
// config and the rank count decide is refused alike on every rank, rank 0 alone saying why
// (parallel/rank_failure.h).
void resolve_config(GptRun& run) {
  const TrainRequest& req = run.req;
  std::vector<std::string> overrides = req.overrides;
  run.config_path = req.config_path;
  if (!req.resume_dir.empty()) {
    check_resume_directory(req.resume_dir);
    if (run.config_path.empty()) run.config_path = (fs::path(req.resume_dir) / "config.toml").string();
    // The run directory stays where it is.
    fs::path rd = fs::absolute(req.resume_dir).lexically_normal();
    if (rd.filename().empty()) rd = rd.parent_path();
    overrides.push_back("run.dir=\"" + rd.parent_path().string() + "\"");
    overrides.push_back("run.name=\"" + rd.filename().string() + "\"");
  }
  if (run.config_path.empty()) fail("no config: pass --config FILE (or --resume RUN_DIR)");
  try {
    run.c = req.resume_dir.empty()
                ? load_train_config(run.config_path, overrides)
                : load_resumed_config(run.config_path, overrides, parallel::launched_world_size(),
                                      &run.resume_config_notes);
    run.planned = parallel_layout(run.c, run.c.communicator == "none" ? 1 : parallel::launched_world_size());
  } catch (const Error& e) {
    throw parallel::AlikeOnEveryRank(e.what());
  }
  run.fault = fault_plan_from_env();
  validate::omp_num_threads_env();
  // Validated against the config's model before any buffer is sized from it.
  if (!req.resume_dir.empty()) run.resume = choose_resume_point(req, run.c.model);
  // train.init_from starts a new run from a Hugging Face model folder's weights; a resumed
  // run continues from its own checkpoint instead. Every rank reads it (a shared file
  // system), so that a bad folder is refused alike everywhere before any collective.
  if (!run.resume && !run.c.init_from.empty())
    run.init_params = read_hf_model(run.c.init_from, run.c.model, "train.init_from (--init-from)");
}

// Stage 2: the communicator (before the model: a GPU rank's also selects the rank's GPU).
void open_ranks(GptRun& run) {
  const TrainConfig& c = run.c;
  parallel::CommOptions co;
  co.kind = c.communicator;
  co.device = c.device;
  co.rendezvous = c.rendezvous;
  co.timeout_s = c.timeout_s;
  co.allreduce = c.allreduce;
  co.ranks_per_node = static_cast<int>(c.ranks_per_node);
  // The communicator outlives this function when the caller holds it (cli/cmd_train.cpp):
  // a failure is then printed before the communicator goes, and ends the peers.
  run.context = run.req.rank_context ? run.req.rank_context : &run.own_context;
  std::unique_ptr<parallel::Communicator>& comm = run.context->comm;
  comm = parallel::make_communicator(co);
  if (comm->world() > 1) {
    // NCCL bounds its own waits by timeout_s and then aborts the communicator, which ends
    // its kernels and fails with a message naming the call (TCP, also GPU ranks' staged TCP,
    // fails naming the peer); the watchdog stays behind it as the last resort.
    const double watchdog_s =
        comm->on_device() || comm->backend().rfind("tcp", 0) == 0 ? c.timeout_s + 30 : c.timeout_s;
    comm = parallel::with_watchdog(std::move(comm), watchdog_s);
  }
  run.comm = comm.get();
  run.rank = comm->rank();
  run.world = comm->world();
  log::set_rank(run.rank, run.world);
}

// Stage 3: the ranks' layout. It is checked before anything is allocated; the ranks of one
// data-parallel coordinate (a tensor group, a pipeline) read the same batches. Ranks
// started with other configs (another layout) stop here, naming the keys, before the
// groups below would split the world in ways that never meet.
void plan_layout(GptRun& run) {
  const TrainConfig& c = run.c;
  if (run.world > 1) check_ranks_agree(*run.comm, config_fingerprint(c, *run.comm));
  run.layout = run.world == run.planned.world() ? run.planned : parallel_layout(c, run.world);
  run.data_rank = run.rank;
  if (run.layout.tp > 1 || run.layout.pp > 1 || c.zero_stage >= 2) {
    run.groups = std::make_unique<parallel::ProcessGroups>(
        *run.comm, parallel::ProcessGrid(grid_options(run.layout)));
    run.data_rank = run.groups->coord().dp;
  }
  run.data_world = run.layout.dp;
  run.threads = set_cpu_threads(c.threads);
}

// Stage 4: the token sources, the resume's notes, and the checks every rank must pass
// before the model is built: a disagreement costs nothing and never reaches a collective
// of another size.
void open_data(GptRun& run) {
  const TrainConfig& c = run.c;
  if (c.train_data.empty())
    fail("{}: data.train is not set: tokenize text with `aiscale data tokenize` and point "
         "data.train at the shards (see configs/quickstart.toml)", run.config_path);
  // Every shard's token ids are checked against the vocabulary as the sources open them.
  run.train_src = make_shard_source(c.train_data, c.batch_size, c.seq_len, run.data_rank,
                                    run.data_world, c.seed, /*shuffle=*/true, c.model.vocab_size);
  if (!c.val_data.empty())
    run.val_src = make_shard_source(c.val_data, c.batch_size, c.seq_len, run.data_rank,
                                    run.data_world, c.seed, /*shuffle=*/false, c.model.vocab_size);
  if (run.resume) {
    const auto& r = run.resume->state;
    // Any layout resumes any other: the checkpoint holds whole tensors and its data position
    // counts samples. What changed is said (another seq_len is refused).
    std::vector<std::string> notes = resume_notes(r, c, run.layout, run.resume->dir);
    notes.insert(notes.begin(), run.resume_config_notes.begin(), run.resume_config_notes.end());
    if (!c.init_from.empty())
      notes.push_back(fmt::format("train.init_from = \"{}\" is not read: the run continues from "
                                  "its checkpoint of step {}", c.init_from, r.step));
    if (run.rank == 0)
      for (const auto& n : notes) log::info("resume note: {}", n);
    if (r.step >= c.steps)
      fail("run '{}' already reached step {} of train.steps = {}: raise it with --set "
           "train.steps=N to train further", run.req.resume_dir, r.step, c.steps);
  }
  // --profile and the run directory's folder: checked before anything is built.
  if (run.req.profile_steps)
    check_profile_steps(*run.req.profile_steps, c.steps - resume_step_of(run.resume) - 1,
                                 1, "train.steps (--steps)");
  // Every rank checks (alike on a shared file system), so none waits for a failed rank 0.
  if (!run.resume) check_writable_dir(c.run_dir, "run.dir (--set run.dir=DIR)");
  // Every rank must run the same configuration on the same data.
  run.fingerprint = fingerprint(c, *run.train_src, run.val_src.get(), *run.comm,
                                resume_step_of(run.resume));
  check_ranks_agree(*run.comm, run.fingerprint);
}

// Stage 5: the model and its data-parallel wrapper (DDP or ZeRO-1 with AdamW outside the
// model, or the model's own synchronisation: train/managed_models.h).
void build_model(GptRun& run) {
  const TrainConfig& c = run.c;
  nn::GptRunOptions ro = gpt_run_options(c);
  ro.comm = run.world > 1 ? run.comm : nullptr;
  ro.groups = run.groups.get();
  ro.sequence_parallel = c.sequence_parallel;
  ro.microbatches = static_cast<int>(c.microbatches);
  ro.pipeline_schedule = c.pipeline_schedule;
  ro.zero_stage = model_zero_stage(c);
  ro.overlap = c.overlap;
  ro.offload_optimizer = c.offload_optimizer;
  ro.bucket_mib = c.bucket_mib;
  ro.grad_comm = parse_dtype(c.grad_comm);
  ro.grad_transport = grad_transport_of(c);
  ro.attention = c.attention;
  ro.comm_timeout_s = c.timeout_s;
  run.model = nn::make_gpt(c.device, c.model, ro);
  run.data_parallel = make_data_parallel(c, *run.model, *run.comm, run.data_world);
}

// Stage 6: the checkpoint's state into the model and the wrapper, or rank 0's initial
// weights on every rank.
void restore_or_broadcast(GptRun& run) {
  nn::GptModel& model = *run.model;
  if (run.resume) {
    const auto& r = run.resume->state;
    // A range at a time from the files: each rank keeps its part (checkpoint_stream.h).
    run.resume->reader->restore(*run.data_parallel);
    run.train_src->restore(r.data);
    run.start_step = r.step;
    run.nonfinite = r.nonfinite_steps;
    if (run.rank == 0) {
      truncate_metrics(run.req.resume_dir, r.step);
      // Checkpoints that are no longer on this run's path are set aside, never loaded
      // again: corrupt ones passed over, and newer ones when resuming from an older step.
      for (const auto& d : run.resume->corrupt)
        log::warn("set aside as {}", set_checkpoint_aside(d, "corrupt"));
      for (const auto& d : complete_checkpoints(fs::path(run.resume->dir).parent_path().string()))
        if (d > run.resume->dir) log::info("newer checkpoint set aside as {}", set_checkpoint_aside(d, "superseded"));
    }
    run.resume->reader.reset();  // the weights live in the model now
  } else if (!run.init_params.empty()) {
    model.set_params(run.init_params.data());  // the whole buffer: each rank takes its part
    run.init_params = {};
  } else if (run.world > 1 && !model.collective_state()) {
    // DDP semantics: every rank starts from rank 0's weights. (A model that holds slices
    // or shards builds them from the seed's whole initialisation, the same on every rank.)
    if (run.c.device == "cuda") {
      // The GPU model keeps a working (bf16/fp16) copy beside its fp32 master weights:
      // its setters refresh both. Once per run, through host memory a checkpoint range at
      // a time (the ranges ascending from 0, as the setters ask).
      const int64_t n = model.num_params();
      const int64_t chunk = std::max<int64_t>(1, kCheckpointChunkBytes / 4);
      std::vector<float> range(static_cast<size_t>(std::min(n, chunk)));
      for (int64_t begin = 0; begin < n; begin += chunk) {
        const int64_t count = std::min(chunk, n - begin);
        model.get_params_range(begin, count, range.data());
        run.comm->broadcast(range.data(), count, 0);
        model.set_params_range(begin, count, range.data());
      }
    } else {
      run.comm->broadcast(model.param_buffer(), model.num_params(), 0);
    }
  }
}

// Stage 7: the run directory (its name agreed on), the environment record, the metrics
// outputs, the profiler, the checkpointer, the start-up line and the stop signals.
void open_run_directory(GptRun& run) {
  const TrainConfig& c = run.c;
  std::string name = c.run_name.empty() ? fmt::format("{}-{}", c.model_preset, utc_compact()) : c.run_name;
  if (run.world > 1) {  // every rank must agree on the generated name: rank 0's wins
    char buf[256] = {};
    if (run.rank == 0) std::snprintf(buf, sizeof buf, "%s", name.c_str());
    run.comm->broadcast_bytes(buf, sizeof buf, 0);
    name = buf;
  }
  run.run_dir = std::make_unique<RunDirectory>(c.run_dir, name, /*resume=*/run.resume.has_value(),
                                               run.rank == 0);
  run.context->run_dir = run.run_dir->path();
  run.run_dir->write_config(to_toml(c));
  write_environment(run.run_dir->path(), *run.comm, c.device, to_toml(c));
  if (run.rank == 0 && (c.tensorboard || c.mllog))
    run.outputs = std::make_unique<MetricsOutputs>(c, run.run_dir->path(), run.world, run.resume.has_value());
  if (run.req.profile_steps)  // after the first (warm-up) step of this invocation
    run.profiler = std::make_unique<profile::OpProfiler>(run.rank, run.start_step + 1, *run.req.profile_steps);
  run.ckpt_dir = (fs::path(run.run_dir->path()) / "checkpoints").string();
  if (run.rank == 0) run.checkpointer = std::make_unique<AsyncCheckpointer>(run.ckpt_dir, c.keep_checkpoints);
  if (run.rank == 0)
    log::info("aiscale train: {} ({:.2f}M parameters: L={} H={} C={} V={}) on {} ({} threads), "
              "{} rank(s) [{}]{}; global batch {} x {} tokens = {} tokens/step; data: {}{}",
              c.model_preset, run.model->num_params() / 1e6, c.model.n_layer, c.model.n_head,
              c.model.n_embd, c.model.vocab_size, run.model->device_name(), run.threads, run.world,
              run.comm->backend(), run.groups ? " " + describe(run.layout) : std::string(),
              c.batch_size * c.grad_accum * run.data_world, c.seq_len,
              c.tokens_per_step(run.data_world), run.train_src->describe(),
              run.resume ? fmt::format("; resuming at step {} from {}", run.start_step, run.resume->dir)
              : c.init_from.empty() ? std::string()
                                    : fmt::format("; weights from {}", c.init_from));
  if (run.world > 1 && run.rank == 0)
    log::debug("ranks agree on configuration {:016x}", run.fingerprint.hash());
  session::install_stop_signals();
}

}  // namespace

int run_training(const TrainRequest& req) {
  if (req.resume_dir.empty() && (req.checkpoint_step >= 0 || req.resume_fallback))
    fail("--checkpoint and --resume-fallback choose where a resumed run continues: give the run "
         "directory with --resume RUN_DIR");
  // Image classifiers ([model] kind = "resnet") have their own config schema, data and
  // model around the same trainer (vision_session.h).
  if (is_vision_request(req)) return run_vision_training(req);
  GptRun run(req);
  resolve_config(run);
  open_ranks(run);
  // Asynchronous training has a loop of its own (param_server_session.h).
  if (run.c.parameter_servers > 0)
    return run_parameter_server_training(req, run.c, run.config_path, *run.comm);
  plan_layout(run);
  open_data(run);
  build_model(run);
  restore_or_broadcast(run);
  open_run_directory(run);
  session::TrainOutcome outcome = session::train(run);
  return session::finish_run(run, outcome);
}

}  // namespace aiscale::train
