// Hugging Face model folders (config.json and the weights, hf_weights.h) as aiscale reads
// and writes them: the weights that start a run (`aiscale train --init-from DIR`,
// train.init_from) and the folder every checkpoint is, which transformers loads
// (docs/guide/checkpoints.md).
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "aiscale/nn/models/gpt_config.h"
#include "aiscale/train/hf_weights.h"

namespace aiscale::train {

// config.json of GPT2LMHeadModel for `c` (tied embeddings, gelu_new, eps 1e-5).
std::string gpt2_hf_config_json(const nn::GptConfig& c);

// Checks a GPT-2 config.json (`path` names it) against the model being trained: the model
// type, every shape field (n_layer, n_head, n_embd, n_positions, vocab_size; each one
// that differs named with the model key and its value), and the fields that would make
// it compute another function than aiscale's GPT-2 (activation_function, n_inner,
// layer_norm_epsilon, tie_word_embeddings, scale_attn_weights,
// scale_attn_by_inverse_layer_idx). The error ends with the fix: the --set of the model
// keys (or the preset) that match the checkpoint.
void check_gpt2_hf_config(const nlohmann::json& config, const nn::GptConfig& model,
                          const std::string& path);

// The parameters (flat, gpt_param_infos order) of the Hugging Face model folder `dir`
// (`what` names where it was given, e.g. "train.init_from"): its config.json checked
// against `model`, then every tensor's name, shape and dtype, all before any weight is
// read. A run directory or a folder of checkpoints given in its place is named as such,
// with the checkpoint folder to give instead.
std::vector<float> read_hf_model(const std::string& dir, const nn::GptConfig& model,
                                 const std::string& what);

// The files of a model folder for `params`: config.json and the weights (one
// model.safetensors, or shards of at most `max_shard_bytes` and their index), fp32.
std::vector<std::pair<std::string, std::string>> gpt2_hf_model_files(
    const nn::GptConfig& c, const std::vector<float>& params,
    uint64_t max_shard_bytes = kHfDefaultShardBytes);

}  // namespace aiscale::train
