// Hugging Face model folders (config.json and the weights, hf_weights.h) as aiscale reads
// and writes them: the weights that start a run (`aiscale train --init-from DIR`,
// train.init_from) and the folder every checkpoint is, which transformers loads
// (docs/guide/checkpoints.md).
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "aiscale/nn/models/gpt_config.h"
#include "aiscale/train/hf_weights.h"

namespace aiscale::train {

// The parameters (flat, gpt_param_infos order) of the Hugging Face model folder `dir`
// (`what` names where it was given, e.g. "train.init_from"): its config.json checked
// against `model` (hf_config.h), then every tensor's name, shape and dtype (hf_mapping.h),
// all before any weight is read. A run directory or a folder of checkpoints given in its
// place is named as such, with the checkpoint folder to give instead.
std::vector<float> read_hf_model(const std::string& dir, const nn::GptConfig& model,
                                 const std::string& what);

// The files of a model folder for `params`: config.json and the weights (one
// model.safetensors, or shards of at most `max_shard_bytes` and their index), fp32.
std::vector<std::pair<std::string, std::string>> hf_model_files(
    const nn::GptConfig& c, const std::vector<float>& params,
    uint64_t max_shard_bytes = kHfDefaultShardBytes);

}  // namespace aiscale::train
