// Checkpoints written and read a range of the flat model at a time (checkpoint.h has the
// files and the folder protocol; the bytes are the same whichever way they were written).
//
// Writing: the ranges are hf_chunks of the model (at most kCheckpointChunkBytes of values,
// never splitting a row). For each of the parameters, then m, then v, every rank fetches
// each range from the source (a collective where the state is sharded: ZeRO, tensor
// slices, pipeline stages), and the writing rank puts it at its place in the files (the
// safetensors headers are laid out first, from the shapes alone), then reuses the buffer.
// A rank so holds at most one range of whole-model values, and the writing rank a second
// range-sized buffer where a Conv1D tensor is stored transposed: 2 x 64 MiB, whatever the
// model's size. The files go into NAME.tmp/ and are fsynced before the folder is renamed
// and COMPLETE written: a crash midway leaves no checkpoint, never half of one. A failure
// of the writing rank (a full disk) is raised after the last range, so that the other
// ranks are never left waiting in a collective.
//
// Reading (CheckpointReader): the metadata and every header are checked first; then each
// rank reads the ranges from the files (a shared file system) and keeps its part of each.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "aiscale/optim/data_parallel.h"
#include "aiscale/train/checkpoint.h"
#include "aiscale/train/hf_mapping.h"

namespace aiscale::train {

// Values of whole-model state a rank stages per range while it streams a checkpoint.
inline constexpr int64_t kCheckpointChunkBytes = int64_t{64} << 20;
// optimizer.bin: magic, version, n (8 bytes), then m and v (n fp32 values each).
inline constexpr uint32_t kOptimizerMagic = 0x504f4941;  // "AIOP"
inline constexpr uint32_t kOptimizerVersion = 1;
inline constexpr uint64_t kOptimizerHeaderBytes = 16;

// What a checkpoint holds, one range at a time: 0 the parameters, 1 m, 2 v.
enum class CheckpointPart { params = 0, m = 1, v = 2 };

// Where a written checkpoint's values come from: the values of `part` in [begin, begin +
// count), either written into `scratch` (count values) or found elsewhere: it returns
// where they are. With a collective source every rank calls it with the same ranges.
struct CheckpointSource {
  int64_t size = 0;  // values of the flat model
  // Values per range: a source that holds whole vectors anyway takes the whole model at
  // once (no copy, no second pass over the collectives).
  int64_t range_values = 0;
  std::function<const float*(CheckpointPart, int64_t begin, int64_t count, float* scratch)> get;
};

// The whole vectors of `s` (params, m, v), read in place.
CheckpointSource vector_source(const CheckpointState& s);
// The run's state through its data-parallel wrapper's range methods; ranges of
// kCheckpointChunkBytes where the wrapper streams (streams_state()), else the whole model.
CheckpointSource data_parallel_source(optim::DataParallel& dp, int64_t size,
                                      int64_t chunk_bytes = kCheckpointChunkBytes);

// What a streamed write held, for the run's log and the tests.
struct StreamedWrite {
  std::string folder;            // the complete folder (the writing rank; else empty)
  int64_t ranges = 0;            // ranges fetched per part
  int64_t largest_range = 0;     // values
  uint64_t staging_peak_bytes = 0;  // the largest buffers this rank held at once
};

// Writes checkpoint `meta` (its metadata: step, data, layout, config, model; its vectors
// are not read) into checkpoints_dir/folder with the values of `source`. Every rank whose
// source is collective calls it; only `writer` touches the files. keep_last >= 0 then
// prunes older step_N checkpoints (checkpoint.h); < 0 prunes nothing.
StreamedWrite write_checkpoint_streamed(const std::string& checkpoints_dir, const std::string& folder,
                                        const CheckpointState& meta, const CheckpointSource& source,
                                        bool writer, int64_t keep_last);

// The state.json of `s` for a model of n_params values.
std::string checkpoint_state_json(const CheckpointState& s, int64_t n_params);

// A checkpoint folder opened for reading: its metadata validated (compared with `expected`
// when given), every weight's name, shape and dtype checked and optimizer.bin's header and
// size (with_optimizer), all before any value is read.
class CheckpointReader {
 public:
  CheckpointReader(const std::string& dir, bool with_optimizer, const nn::GptConfig* expected);
  const std::string& dir() const { return dir_; }
  // The metadata (its vectors empty).
  const CheckpointState& state() const { return state_; }
  int64_t size() const { return map_.size; }
  // Ranges that never split a row, of at most `max_values` values each (hf_chunks).
  std::vector<std::pair<int64_t, int64_t>> ranges(int64_t max_values) const;
  // Values [begin, begin + count) of `part` (a range of ranges()).
  void read(CheckpointPart part, int64_t begin, int64_t count, float* out) const;
  // Every range of every part into the run's wrapper (params, then m, then v), ranges of
  // chunk_bytes where it streams, else the whole model at once. Local: no collective.
  void restore(optim::DataParallel& dp, int64_t chunk_bytes = kCheckpointChunkBytes) const;

 private:
  std::string dir_;
  bool with_optimizer_ = false;
  CheckpointState state_;
  HfModelMap map_;
  std::unique_ptr<HfWeights> weights_;
  HfImport import_;
};

}  // namespace aiscale::train
