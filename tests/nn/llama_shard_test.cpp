// The tensor-parallel slices of the llama family's parameters: a rank holds whole query
// heads and whole key/value heads (a slice of each of QKV's three unequal row blocks), a
// slice of gate and of up, and a vocabulary slice of the token embedding and of the untied
// LM head; the ranks' slices together hold every value once.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "aiscale/nn/models/gpt_layout.h"
#include "aiscale/nn/models/gpt_shard.h"

using namespace aiscale::nn;

namespace {

GptConfig llama_tiny() { return gpt_preset("llama-tiny"); }  // C 64, 4 heads, 2 KV, F 176

TEST(LlamaShardLayout, OneRankIsThePlainLayout) {
  const GptConfig c = llama_tiny();
  const GptLayout full(c);
  const GptShardLayout one(c, 1, 0);
  EXPECT_EQ(one.size(), full.size());
  EXPECT_EQ(one.wpe(), full.layers_begin());  // no position embedding
  EXPECT_EQ(one.layers_begin(), full.layers_begin());
  EXPECT_EQ(one.layer_size(), full.layer_size());
  for (int j = 0; j < kGptBlockParams; ++j)
    EXPECT_EQ(one.at(1, GptBlockParam(j)), full.at(1, GptBlockParam(j))) << j;
  EXPECT_EQ(one.lnf_w(), full.lnf_w());
  EXPECT_EQ(one.lm_head(), full.lm_head());
  // The final unit holds the norm and the untied LM head.
  EXPECT_EQ(one.unit_end(one.units() - 1) - one.unit_begin(one.units() - 1),
            c.n_embd + c.vocab_size * c.n_embd);
}

TEST(LlamaShardLayout, RanksHoldWholeHeadsOfEachBlock) {
  const GptConfig c = llama_tiny();
  const GptLayout full(c);
  std::vector<float> values(static_cast<size_t>(full.size()));
  std::iota(values.begin(), values.end(), 0.0f);  // each value is its full offset
  const int tp = 2;
  const int64_t C = c.n_embd, KV = c.kv_rows(), F = c.ffn(), V = c.vocab_size;
  std::vector<int> seen(values.size(), 0);
  for (int r = 0; r < tp; ++r) {
    const GptShardLayout l(c, tp, r);
    std::vector<float> local(static_cast<size_t>(l.size()));
    l.extract(values.data(), local.data());
    // QKV of layer 1: C/2 query rows, then KV/2 key rows, then KV/2 value rows of this rank.
    const float* qkv = local.data() + l.at(1, GptBlockParam::qkv_w);
    const int64_t q0 = full.at(1, GptBlockParam::qkv_w);
    EXPECT_EQ(qkv[0], float(q0 + (r * C / 2) * C));
    EXPECT_EQ(qkv[(C / 2) * C], float(q0 + (C + r * KV / 2) * C));
    EXPECT_EQ(qkv[(C / 2 + KV / 2) * C], float(q0 + (C + KV + r * KV / 2) * C));
    // gate_up: F/2 gate rows, then F/2 up rows.
    const float* gu = local.data() + l.at(1, GptBlockParam::fc_w);
    const int64_t g0 = full.at(1, GptBlockParam::fc_w);
    EXPECT_EQ(gu[0], float(g0 + (r * F / 2) * C));
    EXPECT_EQ(gu[(F / 2) * C], float(g0 + (F + r * F / 2) * C));
    // down_proj: columns [r F/2, (r+1) F/2) of each row.
    const float* down = local.data() + l.at(1, GptBlockParam::fcproj_w);
    EXPECT_EQ(down[1], float(full.at(1, GptBlockParam::fcproj_w) + r * F / 2 + 1));
    // The untied LM head: this rank's vocabulary rows.
    EXPECT_EQ(local[size_t(l.lm_head())], float(full.lm_head() + r * (V / 2) * C));
    std::vector<float> back(values.size(), -1.0f);
    l.place(local.data(), back.data(), true);
    for (size_t i = 0; i < back.size(); ++i)
      if (back[i] >= 0.0f) {
        EXPECT_EQ(back[i], float(i));
        ++seen[i];
      }
  }
  // Split tensors once over the ranks, replicated ones (the norms) on both.
  for (const GptParamInfo& p : full.tensors()) {
    const bool replicated = !p.is_matrix;
    for (int64_t i = p.offset; i < p.offset + p.shape.numel(); ++i)
      ASSERT_EQ(seen[size_t(i)], replicated ? tp : 1) << p.name;
  }
}

}  // namespace
