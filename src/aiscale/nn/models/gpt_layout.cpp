#include "aiscale/nn/models/gpt_layout.h"

#include <fmt/format.h>

#include "aiscale/core/error.h"

namespace aiscale::nn {

GptLayout::GptLayout(const GptConfig& c) : config_(c) {
  const int64_t C = c.n_embd;
  const bool llama = c.llama();
  int64_t offset = 0;
  const auto add = [&](std::string name, Shape shape, bool matrix, bool transposed, int64_t layer) {
    GptParamInfo p{std::move(name), shape, matrix, transposed, offset, layer};
    offset += shape.numel();
    tensors_.push_back(std::move(p));
  };
  add(llama ? "embed_tokens.weight" : "wte.weight", Shape{c.vocab_size, C}, true, false, -1);
  if (c.learned_positions()) add("wpe.weight", Shape{c.block_size, C}, true, false, -1);
  // One block's tensors: name, shape, matrix (decays; transposed in HF's GPT-2). A llama
  // block has no biases: those entries hold no values and are not listed in tensors().
  struct Block {
    const char* name;
    Shape shape;
    bool matrix;
    bool present;
  };
  const int64_t F = c.ffn();
  const Block gpt2[kGptBlockParams] = {
      {"ln_1.weight", Shape{C}, false, true},           {"ln_1.bias", Shape{C}, false, true},
      {"attn.c_attn.weight", Shape{3 * C, C}, true, true}, {"attn.c_attn.bias", Shape{3 * C}, false, true},
      {"attn.c_proj.weight", Shape{C, C}, true, true},  {"attn.c_proj.bias", Shape{C}, false, true},
      {"ln_2.weight", Shape{C}, false, true},           {"ln_2.bias", Shape{C}, false, true},
      {"mlp.c_fc.weight", Shape{F, C}, true, true},     {"mlp.c_fc.bias", Shape{F}, false, true},
      {"mlp.c_proj.weight", Shape{C, F}, true, true},   {"mlp.c_proj.bias", Shape{C}, false, true},
  };
  const Block llama_block[kGptBlockParams] = {
      {"input_layernorm.weight", Shape{C}, false, true}, {"", Shape{0}, false, false},
      {"self_attn.qkv_proj.weight", Shape{c.qkv_rows(), C}, true, true}, {"", Shape{0}, false, false},
      {"self_attn.o_proj.weight", Shape{C, C}, true, true}, {"", Shape{0}, false, false},
      {"post_attention_layernorm.weight", Shape{C}, false, true}, {"", Shape{0}, false, false},
      {"mlp.gate_up_proj.weight", Shape{2 * F, C}, true, true}, {"", Shape{0}, false, false},
      {"mlp.down_proj.weight", Shape{C, F}, true, true}, {"", Shape{0}, false, false},
  };
  const Block* block = llama ? llama_block : gpt2;
  int64_t in_block = 0;
  for (int j = 0; j < kGptBlockParams; ++j) {
    block_offset_[j] = in_block;
    block_numel_[j] = block[j].present ? block[j].shape.numel() : 0;
    in_block += block_numel_[j];
  }
  block_size_ = in_block;
  for (int64_t l = 0; l < c.n_layer; ++l)
    for (int j = 0; j < kGptBlockParams; ++j)
      if (block[j].present)
        add(fmt::format("{}.{}.{}", llama ? "layers" : "h", l, block[j].name), block[j].shape,
            block[j].matrix, block[j].matrix && !llama, l);
  add(llama ? "norm.weight" : "ln_f.weight", Shape{C}, false, false, -1);
  if (c.has_bias()) add("ln_f.bias", Shape{C}, false, false, -1);
  if (!c.tied()) add("lm_head.weight", Shape{c.vocab_size, C}, true, false, -1);
  size_ = offset;
  AISCALE_CHECK(size_ == c.num_params(), "GPT layout disagrees with GptConfig::num_params");
}

bool GptLayout::decays(const GptParamInfo& p, bool decay_embeddings) {
  return p.is_matrix && (decay_embeddings || !p.is_embedding());
}

std::vector<GptParamInfo> gpt_param_infos(const GptConfig& c) { return GptLayout(c).tensors(); }

}  // namespace aiscale::nn

namespace aiscale::nn {

parallel::dp::GradientOrder gpt_gradient_order(const GptLayout& layout) {
  const int64_t L = layout.config().n_layer;
  // GPT-2 ends each layer with the MLP projection's bias, complete one layer early, so a
  // cut at a layer's start may round down into it. The llama family has no biases: a
  // layer ends with down_proj's weight, complete only after that layer's own backward, so
  // its cuts round up (the next layer's first values join the bucket completed later).
  const bool round_up = !layout.config().has_bias();
  parallel::dp::GradientOrder order;
  order.push_back({0, layout.embeddings_end(), kGptAfterLmHead, true, false});
  for (int64_t l = L - 1; l >= 1; --l) {
    const int64_t end = l == L - 1 ? layout.size() : layout.layer_end(l);
    order.push_back({layout.layer_begin(l), end, static_cast<int>(l), false, round_up});
  }
  const int64_t end0 = L == 1 ? layout.size() : layout.layer_end(0);
  const int64_t mlp = layout.at(0, GptBlockParam::proj_b);
  const int64_t qkv = layout.at(0, GptBlockParam::qkv_w);
  order.push_back({mlp, end0, kGptLayer0Mlp, true, true});
  order.push_back({qkv, mlp, kGptLayer0Qkv, true, true});
  order.push_back({layout.layer_begin(0), qkv, 0, true, false});
  return order;
}

}  // namespace aiscale::nn
