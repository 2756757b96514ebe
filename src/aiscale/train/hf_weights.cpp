#include "aiscale/train/hf_weights.h"

#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "aiscale/core/error.h"
#include "aiscale/core/fs.h"

namespace aiscale::train {
namespace fs = std::filesystem;

bool has_hf_weights(const std::string& dir) {
  std::error_code ec;
  return fs::is_regular_file(fs::path(dir) / kHfWeightsIndex, ec) ||
         fs::is_regular_file(fs::path(dir) / kHfWeightsFile, ec);
}

namespace {

// The shard files of an index, in the order they first appear, and each tensor's file.
// A file name must be a plain name in the folder: an index must not point elsewhere.
std::map<std::string, std::string> read_weight_map(const std::string& index_path) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_file(index_path));
  } catch (const nlohmann::json::exception& e) {
    fail("'{}' is corrupt: {}", index_path, e.what());
  }
  if (!j.is_object() || !j.contains("weight_map") || !j.at("weight_map").is_object())
    fail("'{}' is corrupt: it has no \"weight_map\" object (tensor name -> file)", index_path);
  std::map<std::string, std::string> map;
  for (auto it = j.at("weight_map").begin(); it != j.at("weight_map").end(); ++it) {
    if (!it.value().is_string())
      fail("'{}' is corrupt: \"weight_map\" gives tensor '{}' the file {}, not a file name",
           index_path, it.key(), it.value().dump());
    const std::string file = it.value().get<std::string>();
    if (file.empty() || file.find('/') != std::string::npos || file == "." || file == "..")
      fail("'{}': \"weight_map\" gives tensor '{}' the file '{}': shards must be files of the "
           "index's own folder", index_path, it.key(), file);
    map.emplace(it.key(), file);
  }
  if (map.empty()) fail("'{}' is corrupt: its \"weight_map\" is empty", index_path);
  return map;
}

}  // namespace

HfWeights::HfWeights(const std::string& dir) : dir_(dir) {
  const fs::path d(dir);
  std::error_code ec;
  if (fs::is_regular_file(d / kHfWeightsIndex, ec)) {
    source_ = (d / kHfWeightsIndex).string();
    const auto map = read_weight_map(source_);
    std::map<std::string, size_t> opened;
    for (const auto& [tensor, file] : map) {
      if (opened.count(file)) continue;
      const std::string path = (d / file).string();
      if (!fs::is_regular_file(path, ec))
        fail("'{}' names the shard '{}' (for tensor '{}'), which is not in '{}': copy every "
             "shard of the checkpoint", source_, file, tensor, dir);
      opened.emplace(file, files_.size());
      files_.push_back(std::make_unique<SafeTensorsFile>(path));
    }
    for (const auto& [tensor, file] : map) {
      const size_t f = opened.at(file);
      const auto it = files_[f]->tensors().find(tensor);
      if (it == files_[f]->tensors().end())
        fail("'{}' maps tensor '{}' to '{}', but that file has no tensor '{}': the index and "
             "its shards are of different checkpoints", source_, tensor, files_[f]->path(), tensor);
      tensors_.emplace(tensor, it->second);
      file_index_.emplace(tensor, f);
    }
    // A shard's tensor the index does not list is unexpected: it is named with the others.
    for (size_t f = 0; f < files_.size(); ++f)
      for (const auto& [name, info] : files_[f]->tensors())
        if (!map.count(name)) {
          tensors_.emplace(name, info);
          file_index_.emplace(name, f);
        }
    return;
  }
  const std::string single = (d / kHfWeightsFile).string();
  if (!fs::is_regular_file(single, ec))
    fail("'{}' holds no weights: neither {} nor {} is there", dir, kHfWeightsFile, kHfWeightsIndex);
  source_ = single;
  files_.push_back(std::make_unique<SafeTensorsFile>(single));
  tensors_ = files_[0]->tensors();
  for (const auto& [name, info] : tensors_) file_index_.emplace(name, 0);
}

const std::string& HfWeights::file_of(const std::string& name) const {
  return files_.at(file_index_.at(name))->path();
}

void HfWeights::read(const std::string& name, float* out) const {
  files_.at(file_index_.at(name))->read(tensors_.at(name), out);
}

void HfWeights::read_values(const std::string& name, int64_t first, int64_t count, float* out) const {
  files_.at(file_index_.at(name))->read_values(tensors_.at(name), first, count, out);
}

HfShardPlan hf_shard_plan(const std::vector<uint64_t>& bytes, uint64_t max_shard_bytes) {
  HfShardPlan plan;
  for (uint64_t b : bytes) plan.total_bytes += b;
  plan.single = plan.total_bytes <= max_shard_bytes;
  std::vector<std::vector<size_t>>& shards = plan.shards;
  shards.emplace_back();
  // Greedy in order: a shard is closed when the next tensor would take it over the limit.
  uint64_t in_shard = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (!plan.single && !shards.back().empty() && in_shard + bytes[i] > max_shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(i);
    in_shard += bytes[i];
  }
  return plan;
}

std::string HfShardPlan::file(size_t shard) const {
  if (single) return kHfWeightsFile;
  return fmt::format("model-{:05d}-of-{:05d}.safetensors", shard + 1, shards.size());
}

std::string hf_weight_index(const std::vector<std::string>& names, const HfShardPlan& plan) {
  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  for (size_t s = 0; s < plan.shards.size(); ++s)
    for (size_t i : plan.shards[s]) weight_map[names[i]] = plan.file(s);
  nlohmann::ordered_json index = {{"metadata", {{"total_size", plan.total_bytes}}}, {"weight_map", weight_map}};
  return index.dump(2) + "\n";
}

std::vector<std::pair<std::string, std::string>> hf_weight_files(
    const std::vector<SafeTensor>& tensors, uint64_t max_shard_bytes,
    const std::map<std::string, std::string>& metadata) {
  std::vector<uint64_t> bytes;
  std::vector<std::string> names;
  for (const auto& t : tensors) {
    bytes.push_back(safetensors_tensor_bytes(t));
    names.push_back(t.name);
  }
  // Shards are index lists, each copied only while it is serialised.
  const HfShardPlan plan = hf_shard_plan(bytes, max_shard_bytes);
  std::vector<std::pair<std::string, std::string>> files;
  for (size_t s = 0; s < plan.shards.size(); ++s) {
    std::vector<SafeTensor> part;
    for (size_t i : plan.shards[s]) part.push_back(tensors[i]);
    files.emplace_back(plan.file(s), safetensors_serialize(part, metadata));
  }
  if (!plan.single) files.emplace_back(kHfWeightsIndex, hf_weight_index(names, plan));
  return files;
}

}  // namespace aiscale::train
