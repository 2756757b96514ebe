// Hugging Face model folders written by tests: the tiny GPT-2 of the tests' configs, its
// files as aiscale exports them, and the error a folder's import gives.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "aiscale/core/fs.h"
#include "aiscale/nn/models/gpt_config.h"
#include "aiscale/train/hf_checkpoint.h"
#include "aiscale/train/hf_config.h"
#include "aiscale/train/hf_mapping.h"
#include "aiscale/train/safetensors.h"
#include "error_of.h"

namespace aiscale::testsupport {

// gpt-tiny with the 32-token context of tiny_config (run_support.h).
inline nn::GptConfig tiny() {
  nn::GptConfig c = nn::gpt_preset("gpt-tiny");
  c.block_size = 32;
  return c;
}

inline void write_files(const std::filesystem::path& dir,
                        const std::vector<std::pair<std::string, std::string>>& files) {
  std::filesystem::create_directories(dir);
  for (const auto& [name, bytes] : files) atomic_write_file((dir / name).string(), bytes);
}

// A model folder of `params` for `c`, written as aiscale exports it.
inline std::filesystem::path write_model(const std::filesystem::path& dir, const nn::GptConfig& c,
                                         const std::vector<float>& params,
                                         uint64_t shard_bytes = train::kHfDefaultShardBytes) {
  write_files(dir, train::hf_model_files(c, params, shard_bytes));
  return dir;
}

// The tensors of `params` as HF names them, to edit before writing.
inline std::vector<train::SafeTensor> gpt2_tensors(const nn::GptConfig& c, const std::vector<float>& params) {
  return train::hf_export(train::gpt2_hf_map(c), params.data());
}

inline void write_tensors(const std::filesystem::path& dir, const nn::GptConfig& c,
                          const std::vector<train::SafeTensor>& ts) {
  write_files(dir, {{"model.safetensors", train::safetensors_serialize(ts)},
                    {"config.json", train::hf_config_json(c)}});
}

inline std::string import_error(const std::filesystem::path& dir, const nn::GptConfig& c) {
  return error_of([&] { train::read_hf_model(dir.string(), c, "train.init_from"); });
}

}  // namespace aiscale::testsupport
