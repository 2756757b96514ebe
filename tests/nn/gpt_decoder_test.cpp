// The key/value-cache decoder (nn/models/gpt_decoder.h) against the training model: after
// a prefill and after every decoding step, each stream's logits are those of
// GptModel::forward over the same tokens (the CPU training model, batch 1, the window
// padded: a causal model cannot see the padding from the position read). Tolerance: 1e-4
// absolute on logits of standard deviation ~1.5; the two differ only in the rounding of
// the linear layers' different kernels for different row counts (measured: ~2e-6).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "aiscale/core/error.h"
#include "aiscale/core/rng.h"
#include "aiscale/nn/models/gpt.h"
#include "aiscale/nn/models/gpt_decoder.h"

using namespace aiscale;
using namespace aiscale::nn;

namespace {

constexpr float kTolerance = 1e-4f;

// Weights far from initialisation (LayerNorm gains away from 1, logits of order 1), so
// that a wrong position, head split or cache row shows in the logits.
std::vector<float> test_params(const GptConfig& c, uint64_t seed) {
  std::vector<float> p = gpt_init_params(c, seed);
  Rng rng(seed + 1);
  for (float& x : p) x += 0.2f * rng.normal();
  return p;
}

// The training model's logits after the last of `tokens` (at most block_size of them).
class Reference {
 public:
  Reference(const GptConfig& c, const std::vector<float>& params) : c_(c) {
    GptRunOptions ro;
    ro.batch = 1;
    ro.seq = c.block_size;
    model_ = make_gpt_cpu(c, ro);
    model_->set_params(params.data());
  }
  std::vector<float> logits(const std::vector<int32_t>& tokens) {
    std::vector<int32_t> window(size_t(c_.block_size), 0);
    std::copy(tokens.begin(), tokens.end(), window.begin());
    model_->forward(window.data(), nullptr);
    std::vector<float> out(size_t(c_.vocab_size));
    model_->logits_at(0, static_cast<int64_t>(tokens.size()) - 1, out.data());
    return out;
  }

 private:
  GptConfig c_;
  std::unique_ptr<GptModel> model_;
};

float max_diff(const float* a, const std::vector<float>& b) {
  float d = 0.0f;
  for (size_t i = 0; i < b.size(); ++i) d = std::max(d, std::fabs(a[i] - b[i]));
  return d;
}

struct Shape {
  GptConfig c;
  int64_t streams, context, max_rows;
};

class DecoderMatchesForward : public ::testing::TestWithParam<Shape> {};

TEST_P(DecoderMatchesForward, AfterPrefillAndEveryStep) {
  const Shape& sh = GetParam();
  const GptConfig& c = sh.c;
  const std::vector<float> params = test_params(c, 11);
  Reference ref(c, params);
  GptDecoderOptions o;
  o.streams = sh.streams;
  o.context = sh.context;
  o.max_rows = sh.max_rows;
  auto dec = make_gpt_decoder_cpu(c, o);
  dec->set_params(params.data());
  const int64_t S = sh.streams, W = dec->context(), V = c.vocab_size;

  // Each stream's whole sequence; prompts of different lengths.
  Rng rng(5);
  std::vector<std::vector<int32_t>> seq(static_cast<size_t>(S));
  std::vector<int64_t> fed(static_cast<size_t>(S));
  std::vector<int32_t> flat;
  std::vector<int64_t> counts(static_cast<size_t>(S));
  for (int64_t s = 0; s < S; ++s) {
    for (int64_t t = 0; t < W; ++t) seq[s].push_back(static_cast<int32_t>(rng.below(uint64_t(V))));
    fed[s] = counts[s] = 1 + (3 * s + 2) % (W / 2);
    flat.insert(flat.end(), seq[s].begin(), seq[s].begin() + fed[s]);
  }
  std::vector<float> logits(size_t(S * V), 0.0f);
  dec->feed(flat.data(), counts.data(), logits.data());
  float worst = 0.0f;
  for (int64_t s = 0; s < S; ++s) {
    ASSERT_EQ(dec->length(s), fed[s]);
    const std::vector<int32_t> prefix(seq[s].begin(), seq[s].begin() + fed[s]);
    worst = std::max(worst, max_diff(logits.data() + s * V, ref.logits(prefix)));
  }
  // Then one token per stream per step; stream 0 idles every third step (and every stream
  // once full; a call may feed no stream at all), and an idle stream's row of logits must
  // be left as it was.
  for (int step = 0;; ++step) {
    flat.clear();
    for (int64_t s = 0; s < S; ++s) {
      counts[s] = (fed[s] < W && !(s == 0 && S > 1 && step % 3 == 2)) ? 1 : 0;
      if (counts[s]) flat.push_back(seq[s][fed[s]]);
    }
    if (std::all_of(fed.begin(), fed.end(), [&](int64_t f) { return f == W; })) break;
    const std::vector<float> before = logits;
    dec->feed(flat.data(), counts.data(), logits.data());
    for (int64_t s = 0; s < S; ++s) {
      if (!counts[s]) {
        EXPECT_TRUE(std::equal(logits.begin() + s * V, logits.begin() + (s + 1) * V,
                               before.begin() + s * V)) << "idle stream " << s;
        continue;
      }
      ++fed[s];
      ASSERT_EQ(dec->length(s), fed[s]);
      const std::vector<int32_t> prefix(seq[s].begin(), seq[s].begin() + fed[s]);
      worst = std::max(worst, max_diff(logits.data() + s * V, ref.logits(prefix)));
    }
  }
  EXPECT_LT(worst, kTolerance);
  for (int64_t s = 0; s < S; ++s) EXPECT_EQ(dec->length(s), W) << "stream " << s << " not filled";
}

GptConfig shape(int64_t L, int64_t NH, int64_t C, int64_t T, int64_t V) {
  GptConfig c;
  c.n_layer = L;
  c.n_head = NH;
  c.n_embd = C;
  c.block_size = T;
  c.vocab_size = V;
  return c;
}

// The llama family: grouped-query attention (kv key/value heads), rotary positions with
// Llama 3 scaling (every band in use at these head sizes), SwiGLU, the head tied or not.
GptConfig llama_shape(int64_t L, int64_t NH, int64_t kv, int64_t C, int64_t F, int64_t T,
                      int64_t V, bool tied) {
  GptConfig c = shape(L, NH, C, T, V);
  c.family = GptFamily::llama;
  c.n_kv_head = kv;
  c.ffn_hidden = F;
  c.tie_embeddings = tied;
  c.rope_theta = 10000.0;
  c.rope_scaling = {8.0, 1.0, 4.0, 16};
  return c;
}

INSTANTIATE_TEST_SUITE_P(
    Llama, DecoderMatchesForward,
    ::testing::Values(
        // one stream, groups of 2 query heads, an untied head
        Shape{llama_shape(2, 4, 2, 64, 176, 32, 256, false), 1, 0, 0},
        // three streams in chunks of 5 rows, one key/value head for three query heads
        Shape{llama_shape(2, 3, 1, 96, 100, 24, 101, false), 3, 20, 5},
        // a tied head, every row alone, a context shorter than the block
        Shape{llama_shape(1, 4, 4, 32, 40, 20, 50, true), 2, 16, 1},
        // a prefill of 30 rows in one chunk (the sgemm path)
        Shape{llama_shape(2, 8, 2, 64, 96, 64, 90, false), 4, 64, 0}));

INSTANTIATE_TEST_SUITE_P(
    Shapes, DecoderMatchesForward,
    ::testing::Values(
        // one stream, the whole block as context
        Shape{shape(2, 2, 64, 32, 256), 1, 0, 0},
        // head size 32, an odd vocabulary, three streams fed in chunks of 5 rows (a
        // stream's prompt split over chunks; chunks holding several streams)
        Shape{shape(3, 3, 96, 24, 101), 3, 20, 5},
        // head size 8, every row alone (matrix-vector products only)
        Shape{shape(1, 4, 32, 16, 50), 2, 16, 1},
        // a context shorter than the block, more streams than rows per chunk
        Shape{shape(2, 2, 48, 40, 64), 4, 12, 3},
        // a prefill of 30 rows in one chunk (the sgemm path), then four streams at a time
        Shape{shape(2, 4, 64, 64, 90), 4, 64, 0}));

TEST(GptDecoder, RestartedWindowMatchesTheForwardOverIt) {
  const GptConfig c = shape(2, 2, 64, 16, 128);
  const std::vector<float> params = test_params(c, 3);
  Reference ref(c, params);
  GptDecoderOptions o;
  o.context = 16;
  auto dec = make_gpt_decoder_cpu(c, o);
  dec->set_params(params.data());
  std::vector<int32_t> seq;
  for (int i = 0; i < 24; ++i) seq.push_back((i * 37 + 5) % 128);
  std::vector<float> logits(128);
  int64_t count = 16;
  dec->feed(seq.data(), &count, logits.data());
  EXPECT_LT(max_diff(logits.data(), ref.logits({seq.begin(), seq.begin() + 16})), kTolerance);
  // Restarted with tokens 8..16 at positions 0..8, then decoding on.
  dec->reset(0);
  EXPECT_EQ(dec->length(0), 0);
  count = 9;
  dec->feed(seq.data() + 8, &count, logits.data());
  EXPECT_LT(max_diff(logits.data(), ref.logits({seq.begin() + 8, seq.begin() + 17})), kTolerance);
  count = 1;
  for (int t = 17; t < 24; ++t) {
    dec->feed(seq.data() + t, &count, logits.data());
    EXPECT_LT(max_diff(logits.data(), ref.logits({seq.begin() + 8, seq.begin() + t + 1})), kTolerance)
        << "position " << t - 8;
  }
}

TEST(GptDecoder, RefusedFeedsChangeNothing) {
  const GptConfig c = shape(1, 2, 32, 8, 64);
  const std::vector<float> params = test_params(c, 4);
  GptDecoderOptions o;
  o.streams = 2;
  o.context = 6;
  auto dec = make_gpt_decoder_cpu(c, o);
  std::vector<float> logits(2 * 64);
  std::vector<int32_t> tokens = {1, 2, 3, 4, 5, 6, 7};
  std::vector<int64_t> counts = {5, 2};
  EXPECT_THROW(dec->feed(tokens.data(), counts.data(), logits.data()), Error);  // no weights yet
  dec->set_params(params.data());
  dec->feed(tokens.data(), counts.data(), logits.data());
  counts = {2, 0};  // stream 0 would hold 7 of 6 positions
  EXPECT_THROW(dec->feed(tokens.data(), counts.data(), logits.data()), Error);
  tokens[1] = 64;   // outside the vocabulary
  counts = {1, 1};
  EXPECT_THROW(dec->feed(tokens.data(), counts.data(), logits.data()), Error);
  EXPECT_EQ(dec->length(0), 5);
  EXPECT_EQ(dec->length(1), 2);
  EXPECT_THROW(dec->reset(2), Error);
  // A context beyond the position embeddings, or no streams, is refused when made.
  o.context = 9;
  EXPECT_THROW(make_gpt_decoder_cpu(c, o), Error);
  o.context = 0;
  o.streams = 0;
  EXPECT_THROW(make_gpt_decoder_cpu(c, o), Error);
}

TEST(GptDecoder, CacheIsSizedOnceByStreamsLayersContextAndWidth) {
  const GptConfig c = shape(3, 2, 32, 64, 64);
  GptDecoderOptions o;
  o.streams = 5;
  o.context = 40;
  auto dec = make_gpt_decoder_cpu(c, o);
  EXPECT_EQ(dec->cache_bytes(), size_t(2 * 5 * 3 * 40 * 32) * sizeof(float));
  EXPECT_GE(dec->memory_bytes(), dec->cache_bytes() + size_t(c.num_params()) * sizeof(float));
  EXPECT_EQ(dec->options().max_rows, 128);
  EXPECT_EQ(make_gpt_decoder(std::string("cpu"), c, o)->device_name(), "cpu");
  EXPECT_THROW(make_gpt_decoder(std::string("tpu"), c, o), Error);
}

}  // namespace
