// The one parameter layout of the GPT models (both families of gpt_config.h): every
// parameter tensor with its shape,
// Hugging Face name and offset in the flat parameter (and gradient, and AdamW moment)
// buffer, and the ranges of the layers. The CPU model, the CUDA model, AdamW's weight-decay
// ranges, the data-parallel reducer's gradient segments (and so ZeRO-1's shards) and the
// checkpoints all read it from here.
//
// Flat order: wte, wpe, then per layer ln_1.{weight,bias}, attn.c_attn.{weight,bias},
// attn.c_proj.{weight,bias}, ln_2.{weight,bias}, mlp.c_fc.{weight,bias},
// mlp.c_proj.{weight,bias}; then ln_f.{weight,bias}. The LM head is tied to wte. Matrices
// are stored (out, in); Hugging Face's Conv1D stores (in, out).
//
// The llama family has the same structure with no position embedding and no biases (those
// block entries hold 0 values): embed_tokens, then per layer input_layernorm,
// self_attn.qkv_proj (Q, K, V stacked by rows), self_attn.o_proj, post_attention_layernorm,
// mlp.gate_up_proj (gate, up stacked by rows), mlp.down_proj; then norm, and lm_head when
// the head is untied. The enum below names both families' entries by the GPT-2 role
// (ln1_w = input_layernorm, qkv_w = qkv_proj, proj_w = o_proj, ln2_w =
// post_attention_layernorm, fc_w = gate_up_proj, fcproj_w = down_proj).
//
// Included by CUDA sources (C++17).
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "aiscale/core/tensor.h"
#include "aiscale/nn/models/gpt_config.h"

namespace aiscale::nn {

// The parameters of one transformer block, in their flat order.
enum class GptBlockParam : int {
  ln1_w, ln1_b, qkv_w, qkv_b, proj_w, proj_b, ln2_w, ln2_b, fc_w, fc_b, fcproj_w, fcproj_b,
};
constexpr int kGptBlockParams = 12;

class GptLayout {
 public:
  explicit GptLayout(const GptConfig& c);

  const GptConfig& config() const { return config_; }
  // Every tensor in flat order (GptParamInfo::offset is its start).
  const std::vector<GptParamInfo>& tensors() const& { return tensors_; }
  // Of a temporary layout: by value, so that `for (auto& p : GptLayout(c).tensors())` holds.
  std::vector<GptParamInfo> tensors() && { return std::move(tensors_); }
  // Values in the flat buffer (== config().num_params()).
  int64_t size() const { return size_; }

  // Token and position embeddings: [0, embeddings_end()); wpe starts at wpe() (and holds
  // no values in the llama family).
  int64_t wpe() const { return config_.vocab_size * config_.n_embd; }
  int64_t embeddings_end() const { return layers_begin(); }
  // Layer l occupies [layer_begin(l), layer_end(l)); layer_begin(n_layer) is ln_f's start.
  int64_t layers_begin() const {
    return wpe() + (config_.learned_positions() ? config_.block_size * config_.n_embd : 0);
  }
  int64_t layer_size() const { return block_size_; }
  int64_t layer_begin(int64_t l) const { return layers_begin() + l * block_size_; }
  int64_t layer_end(int64_t l) const { return layer_begin(l + 1); }
  // Offset of a block parameter inside its layer, its values, and its flat offset.
  int64_t in_layer(GptBlockParam p) const { return block_offset_[static_cast<int>(p)]; }
  int64_t numel(GptBlockParam p) const { return block_numel_[static_cast<int>(p)]; }
  int64_t at(int64_t layer, GptBlockParam p) const { return layer_begin(layer) + in_layer(p); }
  // Final norm (its bias holds no values in the llama family), then an untied LM head.
  int64_t lnf_w() const { return layer_begin(config_.n_layer); }
  int64_t lnf_b() const { return lnf_w() + config_.n_embd; }
  int64_t lm_head() const { return lnf_b() + (config_.has_bias() ? config_.n_embd : 0); }

  // Whether a tensor gets weight decay: 2D matrices, the embeddings only with
  // decay_embeddings.
  static bool decays(const GptParamInfo& p, bool decay_embeddings);

 private:
  GptConfig config_;
  std::vector<GptParamInfo> tensors_;
  int64_t size_ = 0, block_size_ = 0;
  int64_t block_offset_[kGptBlockParams] = {};
  int64_t block_numel_[kGptBlockParams] = {};
};

}  // namespace aiscale::nn

#include "aiscale/parallel/data_parallel/gradient_segments.h"

namespace aiscale::nn {

// Points of the GPT model's backward where gradients complete, besides "after layer l's
// backward" (point l >= 0).
constexpr int kGptAfterLmHead = -1;  // the LM head's weight gradient (wte, tied)
constexpr int kGptLayer0Mlp = -3;    // layer 0's MLP and attention projection bias
constexpr int kGptLayer0Qkv = -4;    // layer 0's attention projection and QKV weight

// The order in which the CUDA model's backward completes its gradients:
// - the embeddings (wte, wpe) after the LM head: wte's LM-head part is complete there;
//   the embedding backward adds the rest later, over every rank's positions, after their
//   bucket is summed (the gathered-d(res0) cooperation, parallel/data_parallel/reducer.cuh);
// - layer l (l = L-1 .. 1) after its backward, the top one with ln_f; each layer's last
//   tensor, the MLP projection's bias, is written by the next layer's first LayerNorm
//   backward, so it is complete one layer early and a cut at a layer's start may round
//   down (the llama family has no biases: its layers end with down_proj's weight, and
//   those cuts round up);
// - layer 0 in three, each its own bucket: from the attention projection's bias up (after
//   the second LayerNorm's backward), from the QKV weight up (after its weight gradient),
//   and the first LayerNorm (at the end); these cuts round up into the later part.
parallel::dp::GradientOrder gpt_gradient_order(const GptLayout& layout);

}  // namespace aiscale::nn
