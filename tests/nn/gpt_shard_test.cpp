// The tensor-parallel slices of the GPT parameters: the ranks' slices together hold every
// value once (replicated tensors on every rank), and one rank's layout is the plain one.
#include <gtest/gtest.h>

#include <numeric>
#include <utility>
#include <vector>

#include "aiscale/nn/models/gpt_layout.h"
#include "aiscale/nn/models/gpt_shard.h"

using namespace aiscale::nn;

namespace {
GptConfig tiny() { return GptConfig{2, 2, 64, 32, 256}; }
}  // namespace

TEST(GptShardLayout, OneRankIsThePlainLayout) {
  const GptConfig c = tiny();
  const GptLayout full(c);
  const GptShardLayout one(c, 1, 0);
  EXPECT_EQ(one.size(), full.size());
  EXPECT_EQ(one.wpe(), full.wpe());
  EXPECT_EQ(one.layer_size(), full.layer_size());
  for (int j = 0; j < kGptBlockParams; ++j)
    EXPECT_EQ(one.at(1, GptBlockParam(j)), full.at(1, GptBlockParam(j)));
  EXPECT_EQ(one.lnf_w(), full.lnf_w());
}

TEST(GptShardLayout, SlicesCoverEveryValueOnce) {
  const GptConfig c = tiny();
  const int64_t n = GptLayout(c).size();
  std::vector<float> full(static_cast<size_t>(n));
  std::iota(full.begin(), full.end(), 1.0f);
  for (int tp : {2}) {
    std::vector<float> rebuilt(full.size(), 0.0f), counts(full.size(), 0.0f);
    int64_t total = 0;
    for (int r = 0; r < tp; ++r) {
      const GptShardLayout l(c, tp, r);
      total += l.size();
      std::vector<float> local(static_cast<size_t>(l.size()));
      l.extract(full.data(), local.data());
      std::vector<float> mine(full.size(), 0.0f);
      l.place(local.data(), mine.data(), r == 0);
      for (size_t i = 0; i < full.size(); ++i) {
        rebuilt[i] += mine[i];
        counts[i] += mine[i] != 0.0f;
      }
      // A rank holds whole heads: its QKV rows are a slice of each of Q, K and V.
      const auto& qkv = l.tensors()[2 + int(GptBlockParam::qkv_w)];
      EXPECT_EQ(qkv.kind, ShardKind::rows);
      EXPECT_EQ(qkv.numel, 3 * 64 * 64 / tp);
      EXPECT_EQ(local[qkv.offset], full[qkv.full.offset + r * (64 / tp) * 64]);
      EXPECT_EQ(local[qkv.offset + (64 / tp) * 64], full[qkv.full.offset + (64 + r * 32) * 64]);
    }
    EXPECT_EQ(rebuilt, full);
    for (float k : counts) EXPECT_EQ(k, 1.0f);
    EXPECT_LT(total, tp * n);  // the matrices are split, not copied
  }
}

TEST(GptShardLayout, UnitsAreTheBlocks) {
  const GptShardLayout l(tiny(), 2, 1);
  EXPECT_EQ(l.units(), 4);
  EXPECT_EQ(l.unit_begin(0), 0);
  EXPECT_EQ(l.unit_end(0), l.layer_begin(0));
  EXPECT_EQ(l.unit_end(1) - l.unit_begin(1), l.layer_size());
  EXPECT_EQ(l.unit_begin(3), l.lnf_w());
  EXPECT_EQ(l.unit_end(3), l.size());
}

// The CUDA model's layout: the token embedding (and the tied LM head) whole on every rank,
// the blocks split as above; a vocabulary that tp does not divide is fine.
TEST(GptShardLayout, ReplicatedVocabularyKeepsTheEmbeddingWhole) {
  const GptConfig c{2, 2, 64, 32, 257};
  const GptLayout full(c);
  const int64_t n = full.size();
  std::vector<float> values(static_cast<size_t>(n));
  std::iota(values.begin(), values.end(), 1.0f);
  std::vector<float> rebuilt(values.size(), 0.0f);
  for (int r = 0; r < 2; ++r) {
    const GptShardLayout l(c, 2, r, /*vocab_parallel=*/false);
    EXPECT_EQ(l.tensors()[0].kind, ShardKind::replicated);
    EXPECT_EQ(l.wpe(), full.wpe());  // wte whole: wpe where it is in the full layout
    EXPECT_EQ(l.layers_begin(), full.layers_begin());
    EXPECT_EQ(l.layer_size(), full.layer_size() - (3 * 64 * 64 + 3 * 64 + 64 * 64 + 4 * 64 * 64 +
                                                   4 * 64 + 4 * 64 * 64) / 2);
    EXPECT_EQ(l.size(), n - 2 * (full.layer_size() - l.layer_size()));
    std::vector<float> local(static_cast<size_t>(l.size()));
    l.extract(values.data(), local.data());
    EXPECT_EQ(local[5], values[5]);  // a wte value
    std::vector<float> mine(values.size(), 0.0f);
    l.place(local.data(), mine.data(), r == 0);
    for (size_t i = 0; i < values.size(); ++i) rebuilt[i] += mine[i];
  }
  EXPECT_EQ(rebuilt, values);
}

// The CUDA model's vocabulary split where tp does not divide the vocabulary: 257 token rows
// over 4 ranks in slices of ceil(257 / 4) = 65 rows rounded up to 8, 72: ranks 0-2 hold 72
// real rows each, rank 3 the last 41 and 31 zero padding rows. Every rank's buffer has the
// same length; the ranks' real rows together hold the embedding once.
TEST(GptShardLayout, UnevenVocabularySlicesArePadded) {
  const GptConfig c{2, 4, 64, 32, 257};
  EXPECT_EQ(gpu_vocab_align(257, 4), 8);
  EXPECT_EQ(gpu_vocab_align(50257, 4), 128);
  EXPECT_EQ(vocab_slice_rows(50257, 2, 128), 25216);
  const GptLayout full(c);
  std::vector<float> values(static_cast<size_t>(full.size()));
  std::iota(values.begin(), values.end(), 1.0f);
  std::vector<float> rebuilt(values.size(), 0.0f);
  int64_t size = -1;
  for (int r = 0; r < 4; ++r) {
    const GptShardLayout l(c, 4, r, true, 0, -1, 8);
    EXPECT_TRUE(l.vocab_parallel());
    EXPECT_EQ(l.vocab_slice(), 72);
    EXPECT_EQ(l.vocab_begin(), 72 * r);
    EXPECT_EQ(l.vocab_rows(), r < 3 ? 72 : 41);
    EXPECT_EQ(l.tensors()[0].numel, 72 * 64);
    EXPECT_EQ(l.wpe(), 72 * 64);
    if (size >= 0) {
      EXPECT_EQ(l.size(), size);
    }
    size = l.size();
    std::vector<float> local(static_cast<size_t>(l.size()), -1.0f);
    l.extract(values.data(), local.data());
    EXPECT_EQ(local[0], values[static_cast<size_t>(72 * r * 64)]);
    for (int64_t i = l.vocab_rows() * 64; i < 72 * 64; ++i)
      ASSERT_EQ(local[static_cast<size_t>(i)], 0.0f) << "padding row value " << i;
    std::vector<float> mine(values.size(), 0.0f);
    l.place(local.data(), mine.data(), r == 0);
    for (size_t i = 0; i < values.size(); ++i) rebuilt[i] += mine[i];
  }
  EXPECT_EQ(rebuilt, values);
  // The CPU model's slices (no alignment): 129 rows each, the second with 128 real ones.
  const GptShardLayout cpu(c, 2, 1);
  EXPECT_EQ(cpu.vocab_slice(), 129);
  EXPECT_EQ(cpu.vocab_begin(), 129);
  EXPECT_EQ(cpu.vocab_rows(), 128);
}

// A pipeline stage's layout: the embeddings, its layers and the final norm, in the GPT
// layout's order; each layer where the whole model has it, shifted by the layers before the
// stage; the stages' layers together cover every layer once.
TEST(GptShardLayout, PipelineStageHoldsItsLayersAndTheEmbeddings) {
  const GptConfig c{5, 2, 64, 32, 256};
  const GptLayout full(c);
  std::vector<float> values(static_cast<size_t>(full.size()));
  std::iota(values.begin(), values.end(), 1.0f);
  std::vector<int> layer_count(5, 0);
  for (const auto& [first, end] : {std::pair<int64_t, int64_t>{0, 2}, {2, 3}, {3, 5}}) {
    const GptShardLayout s(c, 1, 0, false, first, end);
    EXPECT_EQ(s.first_layer(), first);
    EXPECT_EQ(s.end_layer(), end);
    EXPECT_EQ(s.size(), full.layers_begin() + (end - first) * full.layer_size() + 2 * c.n_embd);
    EXPECT_EQ(s.layers_begin(), full.layers_begin());
    EXPECT_EQ(s.layer_begin(first), full.layers_begin());
    EXPECT_EQ(s.lnf_w(), s.size() - 2 * c.n_embd);
    EXPECT_EQ(s.units(), int(end - first) + 2);
    EXPECT_EQ(s.unit_begin(int(end - first) + 1), s.lnf_w());
    std::vector<float> local(static_cast<size_t>(s.size()));
    s.extract(values.data(), local.data());
    for (int64_t l = first; l < end; ++l) {
      ++layer_count[size_t(l)];
      for (int j = 0; j < kGptBlockParams; ++j)
        EXPECT_EQ(local[s.at(l, GptBlockParam(j))], values[full.at(l, GptBlockParam(j))]) << l;
    }
    EXPECT_EQ(local[0], values[0]);                        // wte
    EXPECT_EQ(local[s.wpe()], values[full.wpe()]);          // wpe
    EXPECT_EQ(local[s.lnf_w()], values[full.lnf_w()]);      // ln_f
    // Placing back writes the stage's values where they were.
    std::vector<float> back(values.size(), 0.0f);
    s.place(local.data(), back.data(), true);
    EXPECT_EQ(back[full.at(first, GptBlockParam::fc_w)], values[full.at(first, GptBlockParam::fc_w)]);
    if (first > 0) {
      EXPECT_EQ(back[full.at(first - 1, GptBlockParam::fc_w)], 0.0f);
    }
  }
  EXPECT_EQ(layer_count, std::vector<int>(5, 1));
}
