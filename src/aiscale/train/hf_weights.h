// The weights of a Hugging Face model folder: one `model.safetensors`, or shards
// `model-00001-of-0000N.safetensors` listed by `model.safetensors.index.json` (its
// "weight_map" names the file of every tensor), as transformers' save_pretrained writes
// them above its shard size limit.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "aiscale/train/safetensors.h"

namespace aiscale::train {

inline constexpr const char* kHfWeightsFile = "model.safetensors";
inline constexpr const char* kHfWeightsIndex = "model.safetensors.index.json";
// transformers' default max_shard_size ("5GB").
inline constexpr uint64_t kHfDefaultShardBytes = 5'000'000'000;

// Whether `dir` holds weights in one of the two forms (the index or the single file).
bool has_hf_weights(const std::string& dir);

// Every tensor of a folder's weights, each with the file it is in. Opening reads and
// checks the headers (and the index): a tensor the index names but its file lacks, a
// shard that is missing, a file name that leaves the folder, a tensor in two files, are
// refused naming the file and the tensor.
class HfWeights {
 public:
  explicit HfWeights(const std::string& dir);

  const std::string& dir() const { return dir_; }
  // The file that names tensors for messages: the index, or model.safetensors.
  const std::string& source() const { return source_; }
  // Tensor name -> its header entry.
  const std::map<std::string, SafeTensorInfo>& tensors() const { return tensors_; }
  // The file holding `name` (for messages).
  const std::string& file_of(const std::string& name) const;
  // Reads tensor `name` (numel values, converted to fp32) into `out`.
  void read(const std::string& name, float* out) const;
  // Values [first, first + count) of tensor `name` (row-major), converted to fp32.
  void read_values(const std::string& name, int64_t first, int64_t count, float* out) const;

 private:
  std::string dir_, source_;
  std::vector<std::unique_ptr<SafeTensorsFile>> files_;
  std::map<std::string, SafeTensorInfo> tensors_;
  std::map<std::string, size_t> file_index_;  // tensor -> files_ index
};

// The files that hold `tensors` in a model folder: one model.safetensors when they fit in
// `max_shard_bytes`, else shards of at most that size each (a tensor larger than the limit
// gets a file of its own) named model-0000i-of-0000N.safetensors, and the index mapping
// every tensor to its file. Tensors keep their order. (name, bytes) pairs.
// The files of tensors of these sizes in bytes, in order: one model.safetensors when they
// fit in `max_shard_bytes` (single), else shards, each closed when the next tensor would
// take it over the limit, and the index.
struct HfShardPlan {
  bool single = true;
  std::vector<std::vector<size_t>> shards;  // tensor indices per file
  uint64_t total_bytes = 0;
  std::string file(size_t shard) const;     // model.safetensors, model-0000i-of-0000N...
};
HfShardPlan hf_shard_plan(const std::vector<uint64_t>& bytes, uint64_t max_shard_bytes);
// model.safetensors.index.json for tensors `names` in the plan's shards.
std::string hf_weight_index(const std::vector<std::string>& names, const HfShardPlan& plan);

std::vector<std::pair<std::string, std::string>> hf_weight_files(
    const std::vector<SafeTensor>& tensors, uint64_t max_shard_bytes,
    const std::map<std::string, std::string>& metadata);

}  // namespace aiscale::train
