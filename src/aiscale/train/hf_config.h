// config.json of a Hugging Face model folder, for both families of the decoder model:
// GPT2LMHeadModel (model_type "gpt2") and LlamaForCausalLM (model_type "llama"). Written
// with every checkpoint; checked against the model being trained before `--init-from`
// reads a weight.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "aiscale/nn/models/gpt_config.h"

namespace aiscale::train {

// config.json for `c`: GPT2LMHeadModel (tied embeddings, gelu_new, eps 1e-5) or
// LlamaForCausalLM (its KV heads, MLP width, RMSNorm epsilon, rotary base and scaling,
// tied or untied head; max_position_embeddings = block_size).
std::string hf_config_json(const nn::GptConfig& c);

// Checks a config.json (`path` names it) against the model being trained: the model type
// against model.family, every shape field, and the fields under which the same weights
// would compute another function. Each field that differs is named with its model key and
// value, and the error ends with the fix (the --set of the model keys that match, or the
// preset that is that shape).
//  gpt2: n_layer, n_head, n_embd, n_positions, vocab_size; activation_function, n_inner,
//        layer_norm_epsilon, tie_word_embeddings, scale_attn_weights,
//        scale_attn_by_inverse_layer_idx.
//  llama: num_hidden_layers, num_attention_heads, num_key_value_heads, hidden_size,
//        intermediate_size, vocab_size, tie_word_embeddings, rms_norm_eps, rope_theta,
//        rope_scaling (none or rope_type "llama3"), head_dim, hidden_act (silu),
//        attention_bias, mlp_bias. max_position_embeddings is not compared: rotary
//        positions hold no weights, and model.block_size is the context trained.
void check_hf_config(const nlohmann::json& config, const nn::GptConfig& model,
                     const std::string& path);

}  // namespace aiscale::train
