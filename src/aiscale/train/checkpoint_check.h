// Checks on what a checkpoint says about itself, made before any buffer is sized from it:
// its files are written by aiscale, but they may have been edited, damaged or come from
// another run, and a wrong count read from them would size a buffer or build a different
// model without a word. Kept apart from the reading and writing in checkpoint.cpp.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "aiscale/nn/models/gpt_config.h"

namespace aiscale::train {

struct CheckpointState;

// The model of a checkpoint's config.json (Hugging Face GPT2Config, or LlamaConfig for the
// llama family: model_type "llama"): every field an
// integer in the range a config key allows, and a valid GPT shape. `source` names the file.
nn::GptConfig checkpoint_model_from_json(const nlohmann::json& hf, const std::string& source);
// state.json's fields into `s` (step, data position, seed, layout and batch, ...), each
// checked for type and range; n_params must equal the model's parameter count. A
// checkpoint written before the position counted samples (it has data_index, global
// batches) is converted exactly: data_index x world_size x train.batch_size of its
// config_toml, which also gives the layout and batch fields; refused where that batch
// size cannot be read.
void checkpoint_state_from_json(const nlohmann::json& state, CheckpointState& s,
                                const std::string& source);
// "L=2 H=4 C=64 T=32 V=256": a shape as both sides of a mismatch are named.
std::string model_shape_text(const nn::GptConfig& c);
// Refuses a checkpoint of another shape, vocabulary or layout than `expected`, naming
// both. `where` names the checkpoint folder.
void check_checkpoint_model(const nn::GptConfig& found, const nn::GptConfig& expected,
                            const std::string& where);

}  // namespace aiscale::train
