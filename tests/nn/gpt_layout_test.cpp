// The GPT parameter layout: offsets, sizes and layer ranges, against GptConfig::num_params
// and against hand-computed values for gpt-tiny (L=2, C=64, T=64, V=256).
#include <gtest/gtest.h>

#include "aiscale/core/error.h"
#include "aiscale/nn/models/gpt.h"
#include "aiscale/nn/models/gpt_layout.h"

namespace aiscale {
namespace {

TEST(GptLayout, TensorsTileTheBufferAndMatchNumParams) {
  for (const std::string& name : nn::gpt_preset_names()) {
    const nn::GptConfig c = nn::gpt_preset(name);
    const nn::GptLayout layout(c);
    EXPECT_EQ(layout.size(), c.num_params()) << name;
    int64_t at = 0;
    for (const auto& p : layout.tensors()) {
      EXPECT_EQ(p.offset, at) << name << " " << p.name;
      at += p.shape.numel();
    }
    EXPECT_EQ(at, c.num_params()) << name;
    if (c.llama())
      EXPECT_EQ(layout.tensors().size(), size_t(1 + 6 * c.n_layer + 1 + (c.tied() ? 0 : 1))) << name;
    else
      EXPECT_EQ(layout.tensors().size(), size_t(2 + 12 * c.n_layer + 2)) << name;
  }
}

// Llama 3.2 1B's published parameter count, and the hand-counted llama-tiny (L=2, C=64,
// 4 heads of 16, 2 KV heads, F=176, V=256, untied).
TEST(GptLayout, LlamaFamilyCountsAndOffsets) {
  EXPECT_EQ(nn::gpt_preset("llama3-1b-shape").num_params(), 1'235'814'400);
  EXPECT_EQ(nn::gpt_preset("llama3-8b-shape").num_params(), 8'030'261'248);
  const nn::GptConfig c = nn::gpt_preset("llama-tiny");
  ASSERT_TRUE(c.llama());
  EXPECT_EQ(c.kv_rows(), 32);
  EXPECT_EQ(c.qkv_rows(), 128);
  const nn::GptLayout L(c);
  EXPECT_EQ(L.wpe(), 256 * 64);
  EXPECT_EQ(L.layers_begin(), 256 * 64);  // no position embedding
  // A block: 2 norms (128) + qkv 128x64 + o 64x64 + gate/up 352x64 + down 64x176.
  EXPECT_EQ(L.layer_size(), 128 + 8192 + 4096 + 22528 + 11264);
  EXPECT_EQ(L.numel(nn::GptBlockParam::qkv_b), 0);
  EXPECT_EQ(L.in_layer(nn::GptBlockParam::proj_w), 64 + 8192);
  EXPECT_EQ(L.in_layer(nn::GptBlockParam::fc_w), 64 + 8192 + 4096 + 64);
  EXPECT_EQ(L.lnf_w(), L.layer_begin(2));
  EXPECT_EQ(L.lm_head(), L.lnf_w() + 64);
  EXPECT_EQ(L.size(), L.lm_head() + 256 * 64);
  const auto& t = L.tensors();
  EXPECT_EQ(t.front().name, "embed_tokens.weight");
  EXPECT_EQ(t[1].name, "layers.0.input_layernorm.weight");
  EXPECT_EQ(t[2].name, "layers.0.self_attn.qkv_proj.weight");
  EXPECT_FALSE(t[2].transposed_in_hf);
  EXPECT_EQ(t.back().name, "lm_head.weight");
  EXPECT_TRUE(t.back().is_matrix);
  // FLOPs count the untied input embedding out (a lookup), as the PyTorch Llama does.
  EXPECT_DOUBLE_EQ(nn::gpt_train_flops_per_token(c, 64),
                   6.0 * double(c.num_params() - 256 * 64) + 12.0 * 2 * 64 * 64);
}

TEST(GptConfigValidate, LlamaFieldsAreRefusedForGpt2AndCheckedForLlama) {
  nn::GptConfig g = nn::gpt_preset("gpt-tiny");
  g.n_kv_head = 1;
  EXPECT_THROW(g.validate(), Error);
  nn::GptConfig l = nn::gpt_preset("llama-tiny");
  EXPECT_NO_THROW(l.validate());
  l.n_kv_head = 3;  // does not divide 4 heads
  EXPECT_THROW(l.validate(), Error);
  l = nn::gpt_preset("llama-tiny");
  l.n_embd = 60;  // head size 15: odd, rotary needs pairs
  EXPECT_THROW(l.validate(), Error);
}

TEST(GptLayout, HandCheckedOffsetsOfGptTiny) {
  const nn::GptConfig c = nn::gpt_preset("gpt-tiny");
  ASSERT_EQ(c.n_layer, 2);
  ASSERT_EQ(c.n_embd, 64);
  const nn::GptLayout L(c);
  // wte 256 x 64, wpe 64 x 64.
  EXPECT_EQ(L.wpe(), 16384);
  EXPECT_EQ(L.embeddings_end(), 20480);
  // A block: 12 C^2 + 13 C = 49152 + 832.
  EXPECT_EQ(L.layer_size(), 49984);
  EXPECT_EQ(L.layer_begin(0), 20480);
  EXPECT_EQ(L.layer_begin(1), 70464);
  EXPECT_EQ(L.layer_end(1), 120448);
  EXPECT_EQ(L.lnf_w(), 120448);
  EXPECT_EQ(L.lnf_b(), 120512);
  EXPECT_EQ(L.size(), 120576);
  using P = nn::GptBlockParam;
  EXPECT_EQ(L.in_layer(P::ln1_w), 0);
  EXPECT_EQ(L.in_layer(P::ln1_b), 64);
  EXPECT_EQ(L.in_layer(P::qkv_w), 128);
  EXPECT_EQ(L.in_layer(P::qkv_b), 128 + 12288);
  EXPECT_EQ(L.in_layer(P::proj_w), 12416 + 192);
  EXPECT_EQ(L.in_layer(P::proj_b), 12608 + 4096);
  EXPECT_EQ(L.in_layer(P::ln2_w), 16704 + 64);
  EXPECT_EQ(L.in_layer(P::fc_w), 16896);
  EXPECT_EQ(L.in_layer(P::fc_b), 16896 + 16384);
  EXPECT_EQ(L.in_layer(P::fcproj_w), 33280 + 256);
  EXPECT_EQ(L.in_layer(P::fcproj_b), 33536 + 16384);
  EXPECT_EQ(L.in_layer(P::fcproj_b) + L.numel(P::fcproj_b), L.layer_size());
  EXPECT_EQ(L.at(1, P::qkv_w), 70464 + 128);
}

TEST(GptLayout, NamesLayersAndDecayAgreeWithTheTensors) {
  const nn::GptConfig c = nn::gpt_preset("gpt-tiny");
  const nn::GptLayout L(c);
  const auto& t = L.tensors();
  EXPECT_EQ(t.front().name, "wte.weight");
  EXPECT_EQ(t[1].name, "wpe.weight");
  EXPECT_EQ(t.back().name, "ln_f.bias");
  for (const auto& p : t) {
    if (p.layer >= 0) {
      EXPECT_EQ(p.name.rfind("h." + std::to_string(p.layer) + ".", 0), 0u) << p.name;
      EXPECT_GE(p.offset, L.layer_begin(p.layer));
      EXPECT_LE(p.offset + p.shape.numel(), L.layer_end(p.layer));
    }
    EXPECT_EQ(p.transposed_in_hf, p.is_matrix && !p.is_embedding()) << p.name;
  }
  // The decay mask follows the layout: matrices only, embeddings optionally.
  const auto mask = nn::gpt_decay_mask(c, false);
  const auto mask_e = nn::gpt_decay_mask(c, true);
  ASSERT_EQ(int64_t(mask.size()), L.size());
  EXPECT_EQ(mask[0], 0);
  EXPECT_EQ(mask_e[0], 1);
  EXPECT_EQ(mask[size_t(L.at(1, nn::GptBlockParam::fc_w))], 1);
  EXPECT_EQ(mask[size_t(L.at(1, nn::GptBlockParam::fc_b))], 0);
  EXPECT_EQ(mask[size_t(L.lnf_w())], 0);
  // gpt_param_infos is the layout's list.
  const auto infos = nn::gpt_param_infos(c);
  ASSERT_EQ(infos.size(), t.size());
  for (size_t i = 0; i < t.size(); ++i) EXPECT_EQ(infos[i].offset, t[i].offset);
}

TEST(GptLayout, GradientOrderTilesTheBufferInBackwardOrder) {
  const nn::GptLayout L(nn::gpt_preset("gpt-tiny"));
  const parallel::dp::GradientOrder order = nn::gpt_gradient_order(L);
  ASSERT_EQ(order.size(), 5u);
  EXPECT_EQ(order[0].point, nn::kGptAfterLmHead);
  EXPECT_EQ(order[0].begin, 0);
  EXPECT_EQ(order[0].end, 20480);
  EXPECT_EQ(order[1].point, 1);  // layer 1 with ln_f
  EXPECT_EQ(order[1].begin, 70464);
  EXPECT_EQ(order[1].end, 120576);
  EXPECT_EQ(order[2].point, nn::kGptLayer0Mlp);
  EXPECT_EQ(order[2].begin, 20480 + 16704);
  EXPECT_EQ(order[3].point, nn::kGptLayer0Qkv);
  EXPECT_EQ(order[3].begin, 20480 + 128);
  EXPECT_EQ(order[4].point, 0);
  EXPECT_EQ(order[4].begin, 20480);
  EXPECT_EQ(order[4].end, 20608);
  EXPECT_FALSE(order[1].round_begin_up);  // a layer's cut may round down into the bias below
}

// The llama family's layers end with down_proj's weight (no biases): their cuts round up,
// and layer 0's three parts start at the post-attention norm and at qkv_proj.
TEST(GptLayout, LlamaGradientOrderRoundsLayerCutsUp) {
  using P = nn::GptBlockParam;
  const nn::GptLayout L(nn::gpt_preset("llama-tiny"));
  const auto order = nn::gpt_gradient_order(L);
  ASSERT_EQ(order.size(), 5u);
  int64_t covered = 0;
  for (const auto& s : order) covered += s.end - s.begin;
  EXPECT_EQ(covered, L.size());
  EXPECT_EQ(order[0].end, L.layers_begin());
  EXPECT_EQ(order[1].point, 1);
  EXPECT_EQ(order[1].begin, L.layer_begin(1));
  EXPECT_EQ(order[1].end, L.size());  // with the final norm and the untied head
  EXPECT_TRUE(order[1].round_begin_up);
  EXPECT_EQ(order[2].begin, L.at(0, P::ln2_w));
  EXPECT_EQ(order[3].begin, L.at(0, P::qkv_w));
  EXPECT_EQ(order[4].begin, L.layer_begin(0));
}

}  // namespace
}  // namespace aiscale
