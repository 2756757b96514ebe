#include "aiscale/train/hf_checkpoint.h"

#include <filesystem>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "aiscale/core/error.h"
#include "aiscale/core/fs.h"
#include "aiscale/train/checkpoint.h"
#include "aiscale/train/hf_config.h"
#include "aiscale/train/hf_mapping.h"

namespace aiscale::train {
namespace fs = std::filesystem;

std::vector<float> read_hf_model(const std::string& dir, const nn::GptConfig& model,
                                 const std::string& what) {
  std::error_code ec;
  const fs::path d(dir);
  if (!fs::exists(d, ec)) fail("{} '{}': no such folder: give a Hugging Face model folder "
                               "(config.json and model.safetensors)", what, dir);
  if (!fs::is_directory(d, ec))
    fail("{} '{}' is a file: give the folder that holds it, with config.json and "
         "model.safetensors", what, dir);
  if (!fs::exists(d / "config.json", ec)) {
    // A run directory or its checkpoints/ folder: name the checkpoint to give instead.
    for (const fs::path& ckpts : {d / "checkpoints", d})
      if (const auto newest = latest_checkpoint(ckpts.string()))
        fail("{} '{}' is not a model folder (no config.json): give a checkpoint folder, e.g. "
             "'{}' (the newest complete one)", what, dir, *newest);
    fail("{} '{}' is not a Hugging Face model folder: it has no config.json", what, dir);
  }
  if (!has_hf_weights(dir))
    fail("{} '{}' has config.json but no weights: neither {} nor {} is there", what, dir,
         kHfWeightsFile, kHfWeightsIndex);
  const std::string config_path = (d / "config.json").string();
  nlohmann::json config;
  try {
    config = nlohmann::json::parse(read_file(config_path));
  } catch (const nlohmann::json::exception& e) {
    fail("'{}' is not valid JSON: {}", config_path, e.what());
  }
  try {  // a field of an unexpected JSON type is the file's fault, named as such
    check_hf_config(config, model, config_path);
  } catch (const nlohmann::json::exception& e) {
    fail("'{}' is not a valid config.json: {}", config_path, e.what());
  }
  const HfWeights weights(dir);
  return hf_import(hf_model_map(model), weights,
                   "The checkpoint is of another model or damaged: give the folder of a "
                   "checkpoint of this shape");
}

std::vector<std::pair<std::string, std::string>> hf_model_files(
    const nn::GptConfig& c, const std::vector<float>& params, uint64_t max_shard_bytes) {
  auto files = hf_weight_files(hf_export(hf_model_map(c), params.data()), max_shard_bytes,
                               {{"format", "pt"}, {"producer", "aiscale"}});
  files.emplace_back("config.json", hf_config_json(c));
  return files;
}

}  // namespace aiscale::train
