#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "aiscale/core/error.h"
#include "aiscale/core/fs.h"
#include "aiscale/core/log.h"
#include "aiscale/train/checkpoint.h"
#include "aiscale/train/checkpoint_stream.h"
#include "aiscale/train/divergence.h"
#include "aiscale/train/profile_report.h"
#include "aiscale/train/progress.h"
#include "aiscale/train/session_run.h"

namespace aiscale::train::session {
namespace fs = std::filesystem;

CheckpointState checkpoint_meta(GptRun& run, const DataPosition& data, int64_t step) {
  const TrainConfig& c = run.c;
  CheckpointState s;
  s.model = c.model;
  s.step = step;
  s.data = data;
  s.seed = c.seed;
  set_checkpoint_layout(s, c, run.data_world);
  s.nonfinite_steps = run.nonfinite;
  s.config_toml = to_toml(c);
  s.max_shard_bytes = static_cast<uint64_t>(c.max_shard_gb * 1e9);
  return s;
}

CheckpointState snapshot(GptRun& run, const DataPosition& data, int64_t step) {
  CheckpointState s = checkpoint_meta(run, data, step);
  const size_t n = static_cast<size_t>(run.model->num_params());
  s.params.resize(n);
  s.m.resize(n);
  s.v.resize(n);
  // Whole tensors: every rank holds them anyway (the wrapper's state is not sharded).
  run.data_parallel->get_params(s.params.data());
  run.data_parallel->get_state(0, s.m.data());
  run.data_parallel->get_state(1, s.v.data());
  return s;
}

std::string write_streamed(GptRun& run, const DataPosition& data, int64_t step,
                           const std::string& folder, int64_t keep_last) {
  const StreamedWrite w = write_checkpoint_streamed(
      run.ckpt_dir, folder, checkpoint_meta(run, data, step),
      data_parallel_source(*run.data_parallel, run.model->num_params()), run.rank == 0, keep_last);
  if (run.rank == 0)
    log::debug("checkpoint step {} streamed: {} ranges of at most {} values, {} bytes staged",
               step, w.ranges, w.largest_range, w.staging_peak_bytes);
  return w.folder;
}

namespace {

// Whether rank 0 streams its own whole copy of the state (not sharded: one GPU, plain data
// parallelism on GPUs) rather than snapshotting it: a GPU model's state lives in device
// memory, and its whole vectors on the host (12 bytes per parameter) would bound the model
// by the node's memory.
bool streams_own_copy(const GptRun& run) {
  return !run.data_parallel->collective_state() && run.c.device == "cuda" &&
         run.data_parallel->streams_state();
}

// Sharded state (ZeRO, tensor slices, pipeline stages) streams: every rank takes part in
// gathering each range and rank 0 writes it, so that no rank holds the whole model; the
// write is part of the step. A GPU model's unsharded state streams from rank 0 alone (the
// others train on). A host model's state, whole on every rank anyway, is copied once and
// written by rank 0 in the background while training goes on.
void save(GptRun& run, TrainOutcome& o, int64_t step) {
  if (run.data_parallel->collective_state() || (run.rank == 0 && streams_own_copy(run)))
    write_streamed(run, o.position_after_last_step, step, checkpoint_name(step), run.c.keep_checkpoints);
  else if (run.rank == 0)
    run.checkpointer->save(snapshot(run, o.position_after_last_step, step));
  o.last_checkpoint = step;
}

}  // namespace

// Stage 8: the trainer with the run's hooks: fault injection, divergence and NaN/Inf
// handling, stop signals, periodic checkpoints; a failure keeps what was trained.
TrainOutcome train(GptRun& run) {
  TrainOutcome o;
  const TrainConfig& c = run.c;
  const TrainRequest& req = run.req;
  const FaultPlan& fault = run.fault;
  nn::GptModel* model = run.model.get();
  optim::DataParallel* data_parallel = run.data_parallel.get();
  parallel::Communicator* comm = run.comm;
  BatchSource* train_src = run.train_src.get();
  std::unique_ptr<BatchSource>& val_src = run.val_src;
  RunDirectory& run_dir = *run.run_dir;
  MetricsOutputs* outputs = run.outputs.get();
  std::unique_ptr<profile::OpProfiler>& profiler = run.profiler;
  AsyncCheckpointer* checkpointer = run.checkpointer.get();
  const int rank = run.rank, world = run.world;
  const int64_t start_step = run.start_step;
  int64_t& nonfinite = run.nonfinite;
  bool& stopped_by_signal = o.stopped_by_signal;
  std::string& diverged = o.diverged;
  int64_t& last_good_step = o.last_good_step;
  int64_t& last_checkpoint = o.last_checkpoint;
  int64_t& last_step = o.last_step;
  DataPosition& position_after_last_step = o.position_after_last_step;
  TrainResult& r = o.result;
  std::string& late_error = o.late_error;
  last_checkpoint = last_step = start_step;
  position_after_last_step = train_src->position();

  Trainer trainer(c, *model, *train_src, val_src.get(), *comm, &run_dir, data_parallel);
  trainer.show_progress = !req.quiet;
  trainer.outputs = outputs;
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
  auto save_checkpoint = [&](int64_t step) { save(run, o, step); };
  DivergenceDetector divergence(c.divergence_factor, c.divergence_window,
                                c.divergence_climb_factor, c.divergence_climb_window);
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
    if (s.step == fault.term_step) session::signal_stop();
    // Ranks must agree on stopping, or the others would wait in the next all-reduce, and
    // on whether a checkpoint follows (a collective where the state is sharded).
    double stop[2] = {session::stop_signalled() ? 1.0 : 0.0, session::abandon_signalled() ? 1.0 : 0.0};
    if (world > 1) comm->allreduce_sum(stop, 2);
    if (stop[0] > 0) {
      stopped_by_signal = true;
      o.abandoned = stop[1] > 0;
      return false;
    }
    // The final checkpoint too is written here, before the trainer's final evaluation:
    // a failure there must not lose the trained state.
    if ((c.checkpoint_every > 0 && s.step % c.checkpoint_every == 0) || s.step == c.steps)
      save_checkpoint(s.step);
    return true;
  };
  session::wait_for_start_gate();
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
      if (rank == 0 && !data_parallel->collective_state() && last_step > last_checkpoint) {
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

  return o;
}

// Stage 9: what a diverged run keeps, the final checkpoint, the summary and the report.
int finish_run(GptRun& run, TrainOutcome& o) {
  const TrainConfig& c = run.c;
  nn::GptModel* model = run.model.get();
  optim::DataParallel* data_parallel = run.data_parallel.get();
  parallel::Communicator* comm = run.comm;
  RunDirectory& run_dir = *run.run_dir;
  MetricsOutputs* outputs = run.outputs.get();
  std::unique_ptr<profile::OpProfiler>& profiler = run.profiler;
  AsyncCheckpointer* checkpointer = run.checkpointer.get();
  const std::string& ckpt_dir = run.ckpt_dir;
  const ParallelLayout& layout = run.layout;
  const int rank = run.rank, world = run.world, data_world = run.data_world;
  const int64_t start_step = run.start_step;
  const int64_t nonfinite = run.nonfinite;
  const bool stopped_by_signal = o.stopped_by_signal;
  const std::string& diverged = o.diverged;
  const int64_t last_good_step = o.last_good_step;
  const int64_t last_checkpoint = o.last_checkpoint;
  const DataPosition& position_after_last_step = o.position_after_last_step;
  const TrainResult& r = o.result;
  const std::string& late_error = o.late_error;
  auto save_checkpoint = [&](int64_t step) { save(run, o, step); };

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
    if (data_parallel->collective_state()) {  // every rank takes part in gathering the state
      if (world > 1) comm->broadcast_bytes(&keep, 1, 0);
      if (keep)
        diverged_state = write_streamed(run, position_after_last_step, r.steps,
                                        diverged_checkpoint_name(r.steps), /*keep_last=*/-1);
    } else if (keep && streams_own_copy(run)) {
      diverged_state = write_streamed(run, position_after_last_step, r.steps,
                                      diverged_checkpoint_name(r.steps), /*keep_last=*/-1);
    } else if (keep) {
      diverged_state = write_diverged_checkpoint(
          ckpt_dir, snapshot(run, position_after_last_step, r.steps));
    }
  } else if (r.steps != last_checkpoint && !o.abandoned) {
    // Also on a signal (not SIGUSR1: the run is given up), and after NaN/Inf steps (their
    // updates were skipped: the model holds the last good state). Written before the
    // summary marks the run done.
    save_checkpoint(r.steps);
  }
  if (rank == 0) checkpointer->wait();
  const std::string status = diverged_stop       ? "diverged"
                             : o.abandoned       ? "stopped"
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
    if (o.abandoned)
      std::printf("stopped by SIGUSR1 after step %lld, without a checkpoint\n", static_cast<long long>(r.steps));
    else if (stopped_by_signal)
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

}  // namespace aiscale::train::session
