// Checkpoints: everything needed to resume a run exactly, written so that a crash at any
// moment leaves either the previous complete checkpoint or the new one, never half of one.
//
// Layout of <run>/checkpoints/step_00000010/:
//   model.safetensors  weights with Hugging Face GPT-2 names and layouts (Conv1D weights
//                      stored (in, out)), loadable by transformers' GPT2LMHeadModel; above
//                      max_shard_bytes, shards model-0000i-of-0000N.safetensors and
//                      model.safetensors.index.json instead (hf_weights.h)
//   config.json        Hugging Face GPT2Config for that
//   optimizer.bin      AdamW moments m and v (fp32, aiscale layout)
//   state.json         step, data position (samples of the epoch's order), seed, the
//                      layout and batch it was written in, resolved config
//   COMPLETE           written last: only checkpoints with it are ever loaded
// Writing: files go into step_N.tmp/, each fsynced; the folder is renamed to step_N and
// fsynced; then COMPLETE is written atomically. Older complete checkpoints beyond
// keep_last are removed after that: each is first renamed to step_N.deleting (one atomic
// step, after which it is no checkpoint any more), then deleted, so a kill during the
// removal never leaves a half-deleted folder that still looks complete.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "aiscale/nn/models/gpt_config.h"
#include "aiscale/train/hf_weights.h"
#include "aiscale/train/trainer.h"

namespace aiscale::train {

struct CheckpointState {
  nn::GptConfig model;
  int64_t step = 0;  // optimizer steps completed
  DataPosition data;  // samples of the epoch's order, whatever the layout
  uint64_t seed = 0;
  int world_size = 1;  // data-parallel ranks (dp) of the run that wrote it
  // The rest of the writer's layout and its batch (parallel.* and train.* keys), for the
  // notes of a run resumed in another layout; a checkpoint older than these fields has
  // them read from its config_toml (0: not known).
  int64_t tensor_parallel = 1, pipeline_parallel = 1, zero_stage = 0;
  int64_t batch_size = 0, grad_accum = 1, seq_len = 0;
  // The data position was read as global batches (data_index, checkpoints before the
  // position counted samples) and converted: data_index x world_size x batch_size.
  bool position_converted = false;
  int64_t nonfinite_steps = 0;
  std::string config_toml;
  std::vector<float> params, m, v;  // fp32, gpt_param_infos order
  // Writing only: the largest weights file (run.max_shard_gb); more is written in shards.
  uint64_t max_shard_bytes = kHfDefaultShardBytes;
};

// Tokens one optimizer step of the writer took (0: not known).
inline int64_t tokens_per_step(const CheckpointState& s) {
  return s.world_size * s.batch_size * s.grad_accum * s.seq_len;
}
// The layout and batch fields of `s` from a run's config and its data-parallel ranks.
void set_checkpoint_layout(CheckpointState& s, const TrainConfig& c, int data_world);

std::string checkpoint_name(int64_t step);  // "step_00000010"
void write_checkpoint(const std::string& checkpoints_dir, const CheckpointState& s, int64_t keep_last);
// The folder protocol above for any model: `files` (name, bytes) written into
// step_N.tmp/, renamed to step_N, COMPLETE last, then the oldest beyond keep_last pruned.
void write_checkpoint_folder(const std::string& checkpoints_dir, int64_t step,
                             const std::vector<std::pair<std::string, std::string>>& files,
                             int64_t keep_last);
// The same protocol in steps, for a writer that fills the folder itself
// (checkpoint_stream.h): the empty checkpoints_dir/folder.tmp/ (an earlier one removed);
// then, once its files are written and fsynced, its rename to `folder` and COMPLETE
// (returns the folder's path); then the pruning to the newest keep_last step_N.
std::string begin_checkpoint_folder(const std::string& checkpoints_dir, const std::string& folder);
std::string commit_checkpoint_folder(const std::string& checkpoints_dir, const std::string& folder,
                                     int64_t step);
void prune_checkpoints(const std::string& checkpoints_dir, int64_t keep_last);
// Newest folder with a COMPLETE marker, if any.
std::optional<std::string> latest_checkpoint(const std::string& checkpoints_dir);
// Every complete checkpoint folder (step_NNNNNNNN with COMPLETE), oldest first.
std::vector<std::string> complete_checkpoints(const std::string& checkpoints_dir);
// Reads a checkpoint folder; with_optimizer=false skips optimizer.bin (for sampling).
// Its metadata is validated first (checkpoint_check.h); with `expected`, a checkpoint of
// another model shape is refused, naming both, before the weights are read.
CheckpointState read_checkpoint(const std::string& dir, bool with_optimizer,
                                const nn::GptConfig* expected = nullptr);
// Only the model of a checkpoint (its config.json, validated): cheap, to compare shapes
// before anything else is read.
nn::GptConfig read_checkpoint_model(const std::string& dir);
// Where a checkpoint folder is wanted (checkpoint_paths.cpp): empty when `path` is a
// complete checkpoint, else why not, as a sentence naming the path and what to give
// instead: no such path, a file, a run directory, its checkpoints/ folder, a folder
// without checkpoint files, or one whose write was interrupted.
std::string why_not_a_checkpoint(const std::string& path);
// --resume takes a run directory: refuses (naming the path and the fix) a missing path,
// a file, a checkpoint folder or a checkpoints/ folder given in its place.
void check_resume_directory(const std::string& path);
// Renames a checkpoint folder to <name>.<suffix> (e.g. "corrupt", "superseded"): no
// longer a step_N folder, it is never loaded or pruned, and the user can inspect it.
std::string set_checkpoint_aside(const std::string& dir, const std::string& suffix);

// A diverged run's state, kept for inspection but never resumed from: written with the
// folder protocol as checkpoints/diverged-step_N (COMPLETE last; an earlier one of that
// name is replaced). Not a step_N name, so complete_checkpoints() never lists it, --resume
// never takes it and pruning never counts it. Returns the folder's path.
std::string diverged_checkpoint_name(int64_t step);  // "diverged-step_00000010"
std::string write_diverged_checkpoint(const std::string& checkpoints_dir, const CheckpointState& s);
// Sets aside as step_N.diverged every complete checkpoint after step `last_good_step` (the
// weights of a run whose loss was already climbing), so that --resume takes the newest
// good one. Returns the new paths, oldest first.
std::vector<std::string> set_aside_checkpoints_after(const std::string& checkpoints_dir,
                                                     int64_t last_good_step);

// Writes checkpoints on a background thread: save() copies nothing (it takes the
// snapshot by value) and returns at once; a new save waits for the previous write.
class AsyncCheckpointer {
 public:
  AsyncCheckpointer(std::string checkpoints_dir, int64_t keep_last);
  ~AsyncCheckpointer();  // waits for the write in flight
  void save(CheckpointState snapshot);
  void wait();  // rethrows a write error as Error

 private:
  void loop();
  // With the lock held: waits until no write is pending or running, then rethrows the last
  // write's error, if any, as Error.
  void settle(std::unique_lock<std::mutex>& lock);
  std::string dir_;
  int64_t keep_last_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::optional<CheckpointState> pending_;
  bool busy_ = false, stop_ = false;
  std::string error_;
  std::thread thread_;
};

}  // namespace aiscale::train
