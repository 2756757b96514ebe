// The stages of one GPT `aiscale train` invocation (session.cpp runs them in order) and
// what they build, shared by the files that implement them: session.cpp (configuration,
// ranks, layout, data, model, restore, run directory) and session_train.cpp (the training
// loop's hooks, checkpoints, divergence, the summary).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "aiscale/nn/models/gpt.h"
#include "aiscale/optim/data_parallel.h"
#include "aiscale/parallel/process_groups.h"
#include "aiscale/parallel/rank_failure.h"
#include "aiscale/profile/op_profiler.h"
#include "aiscale/train/checkpoint.h"
#include "aiscale/train/checkpoint_stream.h"
#include "aiscale/train/config.h"
#include "aiscale/train/metrics_outputs.h"
#include "aiscale/train/parallel_layout.h"
#include "aiscale/train/rank_agreement.h"
#include "aiscale/train/run_dir.h"
#include "aiscale/train/session.h"
#include "aiscale/train/trainer.h"

namespace aiscale::train::session {

// The checkpoint a resumed run continues from (choose_resume_point), and the corrupt
// folders passed over on the way, to be set aside.
struct ResumePoint {
  CheckpointState state;  // the metadata; the values stay in the files until restored
  std::shared_ptr<CheckpointReader> reader;
  std::string dir;
  std::vector<std::string> corrupt;
};

struct GptRun {
  explicit GptRun(const TrainRequest& r) : req(r) {}
  const TrainRequest& req;
  // resolve_config
  std::string config_path;
  TrainConfig c;
  ParallelLayout planned;
  std::vector<std::string> resume_config_notes;  // keys of the old layout reset
  FaultPlan fault;
  std::optional<ResumePoint> resume;
  std::vector<float> init_params;  // train.init_from's weights (a new run), until placed
  // open_ranks
  parallel::RankContext own_context;
  parallel::RankContext* context = nullptr;  // the caller's, or own_context
  parallel::Communicator* comm = nullptr;    // held by the context
  int rank = 0, world = 1;
  // plan_layout
  ParallelLayout layout;
  std::unique_ptr<parallel::ProcessGroups> groups;
  int data_rank = 0, data_world = 1, threads = 1;
  // open_data
  std::unique_ptr<BatchSource> train_src, val_src;
  RankFingerprint fingerprint;
  // build_model
  std::unique_ptr<nn::GptModel> model;
  std::unique_ptr<optim::DataParallel> data_parallel;
  // restore_or_broadcast
  int64_t start_step = 0, nonfinite = 0;
  // open_run_directory
  std::unique_ptr<RunDirectory> run_dir;
  std::unique_ptr<MetricsOutputs> outputs;
  std::unique_ptr<profile::OpProfiler> profiler;
  std::string ckpt_dir;
  std::unique_ptr<AsyncCheckpointer> checkpointer;  // rank 0
};

// What the training stage leaves for the last one.
struct TrainOutcome {
  TrainResult result;
  bool stopped_by_signal = false;
  bool abandoned = false;  // stopped by SIGUSR1 (on some rank): no checkpoint
  std::string diverged;         // why the run was stopped as diverged
  int64_t last_good_step = 0;   // after a loss divergence: the newest state judged good
  int64_t last_checkpoint = 0, last_step = 0;
  DataPosition position_after_last_step;
  std::string late_error;       // a failure after the last step (final evaluation)
};

// A checkpoint's metadata for the run at `step`.
CheckpointState checkpoint_meta(GptRun& run, const DataPosition& data, int64_t step);
// Whole vectors of the run's state (for a wrapper whose state is not sharded).
CheckpointState snapshot(GptRun& run, const DataPosition& data, int64_t step);
// The run's state streamed into checkpoints_dir/folder (checkpoint_stream.h; rank 0
// writes; every rank calls it where the state is collective, else rank 0 alone): the
// folder's path on rank 0.
std::string write_streamed(GptRun& run, const DataPosition& data, int64_t step,
                           const std::string& folder, int64_t keep_last);

// The stages after the run directory is open (session_train.cpp).
TrainOutcome train(GptRun& run);
int finish_run(GptRun& run, TrainOutcome& outcome);

// The stop flag set by SIGTERM/SIGINT (Slurm preemption, Ctrl-C): GPT runs
// (open_run_directory) and vision runs install the handlers before their first step.
// SIGUSR1 stops the run too, without the checkpoint a stop writes: the run is given up
// (aiscale tune ends the trials that successive halving stops this way).
void install_stop_signals();
bool stop_signalled();
bool abandon_signalled();  // the stop came from SIGUSR1
// With AISCALE_START_GATE=FILE, a run set up (model, data, memory) waits before its first
// step until FILE exists, or a stop signal arrives: aiscale tune starts a GPU's next trial
// while the last one trains and opens its gate when the GPU is free.
void wait_for_start_gate();
void signal_stop();  // AISCALE_FAULT=term@S: as if SIGTERM arrived

}  // namespace aiscale::train::session
