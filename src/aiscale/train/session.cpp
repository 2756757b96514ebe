#include "aiscale/train/session.h"

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
#include "aiscale/train/config.h"
#include "aiscale/train/divergence.h"
#include "aiscale/train/param_server_session.h"
#include "aiscale/train/parallel_layout.h"
#include "aiscale/train/environment.h"
#include "aiscale/train/hf_checkpoint.h"
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
namespace {

// Set by SIGTERM/SIGINT (Slurm preemption, Ctrl-C). A signal handler can only touch
// process-wide state, so this flag is the one exception to "no globals" besides the logger.
volatile std::sig_atomic_t g_stop_signal = 0;
extern "C" void on_stop_signal(int sig) { g_stop_signal = sig; }

}  // namespace

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

CheckpointState snapshot(const TrainConfig& c, nn::GptModel& model, const DataPosition& data,
                         int64_t step, int world, int64_t nonfinite) {
  CheckpointState s;
  s.model = c.model;
  s.step = step;
  s.data = data;
  s.seed = c.seed;
  set_checkpoint_layout(s, c, world);
  s.nonfinite_steps = nonfinite;
  s.config_toml = to_toml(c);
  s.max_shard_bytes = static_cast<uint64_t>(c.max_shard_gb * 1e9);
  const size_t n = static_cast<size_t>(model.num_params());
  s.params.resize(n);
  s.m.resize(n);
  s.v.resize(n);
  model.get_params(s.params.data());
  model.get_optimizer_state(s.m.data(), s.v.data());
  return s;
}

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
struct ResumePoint {
  CheckpointState state;
  std::string dir;
  std::vector<std::string> corrupt;
};

ResumePoint choose_resume_point(const TrainRequest& req, const nn::GptConfig& model) {
  const std::string root = (fs::path(req.resume_dir) / "checkpoints").string();
  const std::vector<std::string> complete = complete_checkpoints(root);
  ResumePoint p;
  if (req.checkpoint_step >= 0) {
    p.dir = (fs::path(root) / checkpoint_name(req.checkpoint_step)).string();
    if (std::find(complete.begin(), complete.end(), p.dir) == complete.end())
      fail("--checkpoint {}: run '{}' has no complete checkpoint of step {}; complete ones: {}",
           req.checkpoint_step, req.resume_dir, req.checkpoint_step, available_steps(complete));
    p.state = read_checkpoint(p.dir, /*with_optimizer=*/true, &model);
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
      p.state = read_checkpoint(*it, /*with_optimizer=*/true, &model);
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

}  // namespace

int run_training(const TrainRequest& req) {
  std::vector<std::string> overrides = req.overrides;
  std::string config_path = req.config_path;
  if (req.resume_dir.empty() && (req.checkpoint_step >= 0 || req.resume_fallback))
    fail("--checkpoint and --resume-fallback choose where a resumed run continues: give the run "
         "directory with --resume RUN_DIR");
  // Image classifiers ([model] kind = "resnet") have their own schema and loop.
  if (is_vision_request(req)) return run_vision_training(req);
  if (!req.resume_dir.empty()) {
    check_resume_directory(req.resume_dir);
    if (config_path.empty()) config_path = (fs::path(req.resume_dir) / "config.toml").string();
    // The run directory stays where it is.
    fs::path rd = fs::absolute(req.resume_dir).lexically_normal();
    if (rd.filename().empty()) rd = rd.parent_path();
    overrides.push_back("run.dir=\"" + rd.parent_path().string() + "\"");
    overrides.push_back("run.name=\"" + rd.filename().string() + "\"");
  }
  if (config_path.empty()) fail("no config: pass --config FILE (or --resume RUN_DIR)");
  // What the config and the launcher's rank count decide is checked before any communicator
  // is built: every rank refuses alike and rank 0 alone says why (parallel/rank_failure.h).
  TrainConfig c;
  ParallelLayout planned;
  std::vector<std::string> resume_config_notes;  // keys of the old layout reset
  try {
    c = req.resume_dir.empty()
            ? load_train_config(config_path, overrides)
            : load_resumed_config(config_path, overrides, parallel::launched_world_size(),
                                  &resume_config_notes);
    planned = parallel_layout(c, c.communicator == "none" ? 1 : parallel::launched_world_size());
  } catch (const Error& e) {
    throw parallel::AlikeOnEveryRank(e.what());
  }
  const FaultPlan fault = fault_plan_from_env();
  validate::omp_num_threads_env();
  // Validated against the config's model before any buffer is sized from it.
  std::optional<ResumePoint> resume;
  if (!req.resume_dir.empty()) resume = choose_resume_point(req, c.model);
  // train.init_from starts a new run from a Hugging Face model folder's weights; a resumed
  // run continues from its own checkpoint instead. Every rank reads it (a shared file
  // system), so that a bad folder is refused alike everywhere before any collective.
  std::vector<float> init_params;
  if (!resume && !c.init_from.empty())
    init_params = read_hf_model(c.init_from, c.model, "train.init_from (--init-from)");

  // Before the model: a GPU rank's communicator also selects the rank's GPU.
  parallel::CommOptions co;
  co.kind = c.communicator;
  co.device = c.device;
  co.rendezvous = c.rendezvous;
  co.timeout_s = c.timeout_s;
  co.allreduce = c.allreduce;
  co.ranks_per_node = static_cast<int>(c.ranks_per_node);
  // The communicator outlives this function when the caller holds it (cli/cmd_train.cpp):
  // a failure is then printed before the communicator goes, and ends the peers.
  parallel::RankContext own_context;
  parallel::RankContext& context = req.rank_context ? *req.rank_context : own_context;
  context.comm = parallel::make_communicator(co);
  std::unique_ptr<parallel::Communicator>& comm = context.comm;
  if (comm->world() > 1) {
    // NCCL bounds its own waits by timeout_s and then aborts the communicator, which ends
    // its kernels and fails with a message naming the call (TCP fails naming the peer); the
    // watchdog stays behind it as the last resort.
    const double watchdog_s =
        comm->on_device() || comm->backend() == "tcp" ? c.timeout_s + 30 : c.timeout_s;
    comm = parallel::with_watchdog(std::move(comm), watchdog_s);
  }
  const int rank = comm->rank(), world = comm->world();
  log::set_rank(rank, world);
  // Asynchronous training has a loop of its own (param_server_session.h).
  if (c.parameter_servers > 0) return run_parameter_server_training(req, c, config_path, *comm);
  // The layout is checked before anything is allocated; the ranks of one data-parallel
  // coordinate (a tensor group, a pipeline) read the same batches.
  // Ranks started with other configs (another layout) stop here, naming the keys, before
  // the groups below would split the world in ways that never meet.
  if (world > 1) check_ranks_agree(*comm, config_fingerprint(c, *comm));
  const ParallelLayout layout = world == planned.world() ? planned : parallel_layout(c, world);
  std::unique_ptr<parallel::ProcessGroups> groups;
  int data_rank = rank;
  if (layout.tp > 1 || layout.pp > 1 || c.zero_stage >= 2) {
    groups = std::make_unique<parallel::ProcessGroups>(*comm,
                                                       parallel::ProcessGrid(grid_options(layout)));
    data_rank = groups->coord().dp;
  }
  const int data_world = layout.dp;
  const int threads = set_cpu_threads(c.threads);
  if (c.train_data.empty())
    fail("{}: data.train is not set: tokenize text with `aiscale data tokenize` and point "
         "data.train at the shards (see configs/quickstart.toml)", config_path);

  auto train_src = make_shard_source(c.train_data, c.batch_size, c.seq_len, data_rank, data_world, c.seed,
                                     /*shuffle=*/true, c.model.vocab_size);
  std::unique_ptr<BatchSource> val_src;
  // Every shard's token ids are checked against the vocabulary as the sources open them.
  if (!c.val_data.empty())
    val_src = make_shard_source(c.val_data, c.batch_size, c.seq_len, data_rank, data_world, c.seed,
                                /*shuffle=*/false, c.model.vocab_size);

  if (resume) {
    const auto& r = resume->state;
    // Any layout resumes any other: the checkpoint holds whole tensors and its data position
    // counts samples. What changed is said (another seq_len is refused).
    std::vector<std::string> notes = resume_notes(r, c, layout, resume->dir);
    notes.insert(notes.begin(), resume_config_notes.begin(), resume_config_notes.end());
    if (!c.init_from.empty())
      notes.push_back(fmt::format("train.init_from = \"{}\" is not read: the run continues from "
                                  "its checkpoint of step {}", c.init_from, r.step));
    if (rank == 0)
      for (const auto& n : notes) log::info("resume note: {}", n);
    if (r.step >= c.steps)
      fail("run '{}' already reached step {} of train.steps = {}: raise it with --set "
           "train.steps=N to train further", req.resume_dir, r.step, c.steps);
  }
  // --profile and the run directory's folder: checked before anything is built.
  if (req.profile_steps)
    check_profile_steps(*req.profile_steps, c.steps - resume_step_of(resume) - 1, 1,
                                 "train.steps (--steps)");
  // Every rank checks (alike on a shared file system), so none waits for a failed rank 0.
  if (!resume) check_writable_dir(c.run_dir, "run.dir (--set run.dir=DIR)");
  // Every rank must run the same configuration on the same data: checked before the model
  // is built, so a disagreement costs nothing and never reaches a collective of another size.
  const int64_t resume_step = resume ? resume->state.step : 0;
  const RankFingerprint fp = fingerprint(c, *train_src, val_src.get(), *comm, resume_step);
  check_ranks_agree(*comm, fp);

  nn::GptRunOptions ro = gpt_run_options(c);
  ro.comm = world > 1 ? comm.get() : nullptr;
  ro.groups = groups.get();
  ro.sequence_parallel = c.sequence_parallel;
  ro.microbatches = static_cast<int>(c.microbatches);
  ro.pipeline_schedule = c.pipeline_schedule;
  ro.zero_stage = static_cast<int>(c.zero_stage);
  ro.overlap = c.overlap;
  ro.offload_optimizer = c.offload_optimizer;
  ro.bucket_mib = c.bucket_mib;
  ro.grad_comm = parse_dtype(c.grad_comm);
  ro.grad_transport = c.grad_transport;
  ro.attention = c.attention;
  ro.comm_timeout_s = c.timeout_s;
  auto model = nn::make_gpt(c.device, c.model, ro);

  int64_t start_step = 0, nonfinite = 0;
  if (resume) {
    const auto& r = resume->state;
    model->set_params(r.params.data());
    model->set_optimizer_state(r.m.data(), r.v.data());
    train_src->restore(r.data);
    start_step = r.step;
    nonfinite = r.nonfinite_steps;
    if (rank == 0) {
      truncate_metrics(req.resume_dir, r.step);
      // Checkpoints that are no longer on this run's path are set aside, never loaded
      // again: corrupt ones passed over, and newer ones when resuming from an older step.
      for (const auto& d : resume->corrupt)
        log::warn("set aside as {}", set_checkpoint_aside(d, "corrupt"));
      for (const auto& d : complete_checkpoints(fs::path(resume->dir).parent_path().string()))
        if (d > resume->dir) log::info("newer checkpoint set aside as {}", set_checkpoint_aside(d, "superseded"));
    }
    resume->state = {};  // the weights live in the model now
  } else if (!init_params.empty()) {
    model->set_params(init_params.data());  // the whole buffer: each rank takes its part
    init_params = {};
  } else if (world > 1 && !model->collective_state()) {
    // DDP semantics: every rank starts from rank 0's weights. (A model that holds slices
    // or shards builds them from the seed's whole initialisation, the same on every rank.)
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
  context.run_dir = run_dir.path();
  run_dir.write_config(to_toml(c));
  write_environment(run_dir.path(), *comm, c.device, to_toml(c));
  std::unique_ptr<MetricsOutputs> outputs;
  if (rank == 0 && (c.tensorboard || c.mllog))
    outputs = std::make_unique<MetricsOutputs>(c, run_dir.path(), world, resume.has_value());
  std::unique_ptr<profile::OpProfiler> profiler;
  if (req.profile_steps)  // after the first (warm-up) step of this invocation
    profiler = std::make_unique<profile::OpProfiler>(rank, start_step + 1, *req.profile_steps);
  const std::string ckpt_dir = (fs::path(run_dir.path()) / "checkpoints").string();
  std::unique_ptr<AsyncCheckpointer> checkpointer;
  if (rank == 0) checkpointer = std::make_unique<AsyncCheckpointer>(ckpt_dir, c.keep_checkpoints);

  if (rank == 0)
    log::info("aiscale train: {} ({:.2f}M parameters: L={} H={} C={} V={}) on {} ({} threads), "
              "{} rank(s) [{}]{}; global batch {} x {} tokens = {} tokens/step; data: {}{}",
              c.model_preset, model->num_params() / 1e6, c.model.n_layer, c.model.n_head,
              c.model.n_embd, c.model.vocab_size, model->device_name(), threads, world,
              comm->backend(), groups ? " " + describe(layout) : std::string(),
              c.batch_size * c.grad_accum * data_world, c.seq_len,
              c.tokens_per_step(data_world), train_src->describe(),
              resume ? fmt::format("; resuming at step {} from {}", start_step, resume->dir)
              : c.init_from.empty() ? std::string()
                                    : fmt::format("; weights from {}", c.init_from));
  if (world > 1 && rank == 0)
    log::debug("ranks agree on configuration {:016x}", fp.hash());

  g_stop_signal = 0;
  std::signal(SIGTERM, on_stop_signal);
  std::signal(SIGINT, on_stop_signal);

  Trainer trainer(c, *model, *train_src, val_src.get(), *comm, &run_dir);
  trainer.show_progress = !req.quiet;
  trainer.outputs = outputs.get();
  trainer.profiler = profiler.get();
  trainer.before_update = [&](int64_t step_index) {
    if (step_index + 1 == fault.blowup_step) {
      std::vector<float> params(static_cast<size_t>(model->num_params()));
      model->get_params(params.data());
      for (float& w : params) w *= 30.0f;
      model->set_params(params.data());
    }
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
  std::string diverged;  // why the run was stopped as diverged
  int64_t last_checkpoint = start_step, last_step = start_step;
  DataPosition position_after_last_step = train_src->position();
  // Rank 0 writes; with sharded (ZeRO-1) state every rank takes part in gathering it.
  auto save_checkpoint = [&](int64_t step) {
    if (rank == 0)
      checkpointer->save(snapshot(c, *model, position_after_last_step, step, data_world, nonfinite));
    else if (model->collective_state())
      snapshot(c, *model, position_after_last_step, step, data_world, nonfinite);
    last_checkpoint = step;
  };
  DivergenceDetector divergence(c.divergence_factor, c.divergence_window,
                                c.divergence_climb_factor, c.divergence_climb_window);
  int64_t last_good_step = 0;  // after a loss divergence: the newest state judged good
  trainer.after_step = [&](const StepStats& s) {
    // The loss is the mean over ranks and the norm that of the summed gradients: every
    // rank decides alike, without a collective.
    bool stop_diverged = false;
    if (!std::isfinite(s.loss) || !std::isfinite(s.grad_norm)) {
      ++nonfinite;
      // The update was skipped: the model still holds the state after the last good step.
      if (nonfinite > c.max_nonfinite_steps) {
        diverged = fmt::format("{} steps had a NaN/Inf loss or gradient (last at step {}), more "
                               "than train.max_nonfinite_steps = {}", nonfinite, s.step,
                               c.max_nonfinite_steps);
        stop_diverged = true;
      }
    } else if (auto why = divergence.observe(s.step, s.loss)) {
      diverged = *why;
      last_good_step = divergence.last_good_step();
      stop_diverged = true;
    }
    last_step = s.step;
    position_after_last_step = train_src->position();
    if (stop_diverged) return false;
    if (s.step == fault.kill_step && rank == fault.kill_rank) std::raise(SIGKILL);
    if (s.step == fault.fail_step && rank == fault.fail_rank)
      fail("AISCALE_FAULT=fail@{}:{}: rank {} fails on purpose after step {}", s.step, rank, rank,
           s.step);
    if (s.step == fault.term_step) g_stop_signal = SIGTERM;
    // Ranks must agree on stopping, or the others would wait in the next all-reduce.
    double stop = g_stop_signal != 0 ? 1.0 : 0.0;
    if (world > 1) comm->allreduce_sum(&stop, 1);
    if (stop > 0) {
      stopped_by_signal = true;
      return false;
    }
    // The final checkpoint too is written here, before the trainer's final evaluation:
    // a failure there must not lose the trained state.
    if ((c.checkpoint_every > 0 && s.step % c.checkpoint_every == 0) || s.step == c.steps)
      save_checkpoint(s.step);
    return true;
  };
  TrainResult r;
  std::string late_error;  // a failure after the last step (final evaluation)
  if (outputs) outputs->run_start(start_step);
  try {
    r = trainer.run(start_step);
  } catch (const std::exception& e) {
    if (outputs) outputs->run_stop(last_step, "aborted");
    // Keep what was trained: the state after the last completed step is whole (the failed
    // step stopped before its update). Sharded state would need the other ranks, and a
    // rank that is not 0 writes nothing.
    const bool finished = last_step == c.steps && diverged.empty();
    if (!finished) {
      if (rank == 0 && !model->collective_state() && last_step > last_checkpoint) {
        try {
          save_checkpoint(last_step);
          checkpointer->wait();
          log::error("training failed after step {}; its checkpoint is written: resume with "
                     "aiscale train --resume {}", last_step, run_dir.path());
        } catch (const std::exception& again) {
          log::error("training failed after step {} and its checkpoint could not be written: {}",
                     last_step, again.what());
        }
      }
      throw;
    }
    late_error = e.what();
    r.steps = last_step;
  }

  const bool diverged_stop = !diverged.empty();
  std::vector<std::string> set_aside;  // step_N checkpoints of a climb, now step_N.diverged
  std::string diverged_state;          // where the diverged weights were kept, if they were
  if (diverged_stop && std::isfinite(r.final_loss) && nonfinite <= c.max_nonfinite_steps) {
    // The loss ran away: the weights in memory produced it, and so did those of any
    // checkpoint after the last good step (a climb spans several). Those are set aside,
    // so that --resume takes the newest good one; the weights in memory are never a step_N
    // checkpoint. When no good checkpoint is left they are kept as diverged-step_N (never
    // resumed from), so that nothing trained is lost.
    char keep = 0;
    if (rank == 0) {
      checkpointer->wait();
      set_aside = set_aside_checkpoints_after(ckpt_dir, last_good_step);
      keep = latest_checkpoint(ckpt_dir) ? 0 : 1;
    }
    if (model->collective_state()) {  // every rank takes part in gathering the state
      if (world > 1) comm->broadcast_bytes(&keep, 1, 0);
      if (keep) {
        const CheckpointState state =
            snapshot(c, *model, position_after_last_step, r.steps, data_world, nonfinite);
        if (rank == 0) diverged_state = write_diverged_checkpoint(ckpt_dir, state);
      }
    } else if (keep) {
      diverged_state = write_diverged_checkpoint(
          ckpt_dir, snapshot(c, *model, position_after_last_step, r.steps, data_world, nonfinite));
    }
  } else if (r.steps != last_checkpoint) {
    // Also on a signal, and after NaN/Inf steps (their updates were skipped: the model
    // holds the last good state). Written before the summary marks the run done.
    save_checkpoint(r.steps);
  }
  if (rank == 0) checkpointer->wait();
  const std::string status = diverged_stop       ? "diverged"
                             : stopped_by_signal ? "interrupted"
                                                 : "finished";
  if (outputs) outputs->run_stop(r.steps, status == "finished" && late_error.empty() ? "success" : "aborted");
  if (profiler && profiler->step_times_s().size() > 0)
    write_profile(*profiler, *comm, (fs::path(run_dir.path()) / "profile").string());
  std::optional<std::string> newest;
  if (rank == 0) newest = latest_checkpoint(ckpt_dir);
  nlohmann::json summary = {
      {"status", status},
      {"steps", r.steps},
      {"first_loss", r.first_loss},
      {"final_loss", r.final_loss},
      {"tokens_per_s_median", r.tokens_per_s_median},
      {"step_time_median_s", r.step_time_median_s},
      {"step_time_p90_s", r.step_time_p90_s},
      {"wall_s", r.wall_s},
      {"tokens_trained", static_cast<double>(c.tokens_per_step(data_world)) * r.steps},
      {"n_params", model->num_params()},
      {"device", model->device_name()},
      {"world_size", world},
      {"layout", {{"dp", layout.dp}, {"tp", layout.tp}, {"pp", layout.pp},
                  {"zero_stage", c.zero_stage}, {"sequence_parallel", c.sequence_parallel}}},
      {"nonfinite_steps", nonfinite},
      {"checkpoint", newest ? *newest : (fs::path(ckpt_dir) / checkpoint_name(r.steps)).string()},
      {"finished", utc_iso8601()}};
  if (!std::isfinite(r.first_loss)) summary["first_loss"] = nullptr;
  if (!std::isfinite(r.final_loss)) summary["final_loss"] = nullptr;
  if (r.val_loss >= 0) summary["val_loss"] = r.val_loss;
  if (r.pipeline_bubble_median >= 0) summary["pipeline_bubble_median"] = r.pipeline_bubble_median;
  summary["communication"] = r.communication;
  if (diverged_stop) {
    summary["diverged"] = diverged;
    // Only a checkpoint of a good state is named as the run's checkpoint.
    summary["checkpoint"] = newest ? nlohmann::json(*newest) : nlohmann::json(nullptr);
    if (!diverged_state.empty()) summary["diverged_checkpoint"] = diverged_state;
    if (!set_aside.empty()) summary["checkpoints_set_aside"] = set_aside;
  }
  if (!late_error.empty()) summary["final_evaluation_error"] = late_error;
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
    if (diverged_stop) {
      std::string kept;
      if (!set_aside.empty())
        kept += fmt::format(" The checkpoints written while the loss climbed are set aside as "
                            "{} (never resumed from).", fmt::join(set_aside, ", "));
      if (!diverged_state.empty())
        kept += fmt::format(" The diverged weights are kept in {} for inspection; it is never "
                            "resumed from.", diverged_state);
      const std::string fix =
          "lower train.lr (or raise train.divergence_factor or "
          "train.divergence_climb_factor; 0 turns a check off)";
      if (newest)
        log::error("training diverged and was stopped: {}.{} The last good state is checkpoint "
                   "{}: {} and resume from it with aiscale train --resume {}", diverged, kept,
                   *newest, fix, run_dir.path());
      else
        log::error("training diverged and was stopped: {}.{} No checkpoint holds a good state: "
                   "{} and start the run again", diverged, kept, fix);
    }
  }
  if (diverged_stop) return kExitDiverged;
  if (!late_error.empty())
    fail("training finished and its checkpoint and summary are written, but the final "
         "evaluation failed: {}", late_error);
  return 0;
}

}  // namespace aiscale::train
