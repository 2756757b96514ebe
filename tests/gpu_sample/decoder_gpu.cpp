// The GPU decoder with its key/value cache against the CPU model's full-window forward
// (fp32): the same logits within bf16 rounding, for a prompt prefilled in one call, tokens
// decoded one call each, several streams decoded together, and the graph replays of the
// decoding steps (from the second step of a stream count on).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <numeric>
#include <vector>

#include "aiscale/core/rng.h"
#include "aiscale/nn/models/gpt.h"
#include "aiscale/nn/models/gpt_cuda_decoder.h"
#include "aiscale/nn/models/gpt_decoder.h"
#include "aiscale/parallel/bootstrap.h"

namespace aiscale::nn {
namespace {

// ||a - b|| / ||b||
double relative_error(const float* a, const float* b, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

int64_t argmax(const float* x, int64_t n) { return std::max_element(x, x + n) - x; }

struct Case {
  GptConfig config;
  std::vector<float> params;
  std::unique_ptr<GptModel> cpu;
};

Case make_case(int64_t layers, int64_t heads, int64_t width, int64_t vocab, int64_t block) {
  Case k;
  k.config.n_layer = layers;
  k.config.n_head = heads;
  k.config.n_embd = width;
  k.config.vocab_size = vocab;
  k.config.block_size = block;
  k.params = gpt_init_params(k.config, 7);
  // Larger weights than the initialisation's, so that attention is far from uniform.
  for (float& w : k.params) w *= 2.5f;
  GptRunOptions o;
  o.batch = 1;
  o.seq = block;
  k.cpu = make_gpt("cpu", k.config, o);
  k.cpu->set_params(k.params.data());
  return k;
}

// The CPU model's logits of every position of `tokens` (padded to the context).
std::vector<float> cpu_logits(Case& k, const std::vector<int32_t>& tokens) {
  const int64_t T = k.config.block_size, V = k.config.vocab_size;
  std::vector<int32_t> window(T, 0);
  std::copy(tokens.begin(), tokens.end(), window.begin());
  k.cpu->forward(window.data(), nullptr);
  std::vector<float> out(tokens.size() * V);
  for (size_t t = 0; t < tokens.size(); ++t) k.cpu->logits_at(0, t, out.data() + t * V);
  return out;
}

std::vector<int32_t> random_tokens(int n, int64_t vocab, uint64_t seed) {
  Rng rng(seed);
  std::vector<int32_t> t(n);
  for (int32_t& x : t) x = static_cast<int32_t>(rng.uniform() * vocab) % vocab;
  return t;
}

constexpr double kTolerance = 3e-2;  // bf16 weights, activations and cache against fp32

void check_one_stream(int64_t layers, int64_t heads, int64_t width, int64_t vocab, int64_t block,
                      int prompt, int total) {
  Case k = make_case(layers, heads, width, vocab, block);
  const int64_t V = vocab;
  const auto tokens = random_tokens(total, vocab, 11);
  const auto ref = cpu_logits(k, tokens);
  auto dec = make_cuda_gpt_decoder(k.config, k.params.data(), 1, prompt);
  // Prefill: the prompt's rows in one call, the logits of the last.
  std::vector<DecodeRow> rows;
  for (int t = 0; t < prompt; ++t) rows.push_back({0, t, tokens[t]});
  const int32_t last = prompt - 1;
  const float* logits = dec->run(rows.data(), prompt, &last, 1);
  EXPECT_LT(relative_error(logits, ref.data() + (prompt - 1) * V, V), kTolerance);
  // Then one token per call (the third call on is a graph replay).
  int agree = 0;
  for (int t = prompt; t < total; ++t) {
    const DecodeRow row{0, t, tokens[t]};
    const int32_t zero = 0;
    logits = dec->run(&row, 1, &zero, 1);
    const double err = relative_error(logits, ref.data() + t * V, V);
    EXPECT_LT(err, kTolerance) << "position " << t;
    agree += argmax(logits, V) == argmax(ref.data() + t * V, V);
  }
  EXPECT_GE(agree, (total - prompt) * 8 / 10);  // the greedy choice mostly survives bf16
}

TEST(CudaDecoder, PrefillAndDecodeMatchTheCpuForwardGpt2Heads) {
  check_one_stream(3, 4, 256, 300, 96, 7, 96);  // head size 64, up to the whole context
}

TEST(CudaDecoder, PrefillAndDecodeMatchTheCpuForwardSmallHeads) {
  check_one_stream(2, 4, 64, 256, 40, 1, 40);  // head size 16; a prompt of one token
}

TEST(CudaDecoder, StreamsDecodedTogetherMatchEachAlone) {
  Case k = make_case(2, 2, 64, 200, 48);
  const int64_t V = 200;
  const int S = 3, steps = 20;
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::vector<float>> refs;
  for (int s = 0; s < S; ++s) {
    tokens.push_back(random_tokens(4 + s + steps, V, 100 + s));  // prompts of 4, 5, 6
    refs.push_back(cpu_logits(k, tokens.back()));
  }
  auto dec = make_cuda_gpt_decoder(k.config, k.params.data(), S, 16);
  for (int s = 0; s < S; ++s) {  // each stream's prompt, all but its last token
    std::vector<DecodeRow> rows;
    for (int t = 0; t < 3 + s; ++t) rows.push_back({s, t, tokens[s][t]});
    dec->run(rows.data(), static_cast<int>(rows.size()), nullptr, 0);
  }
  std::vector<int32_t> all(S);
  std::iota(all.begin(), all.end(), 0);
  for (int i = 0; i < steps; ++i) {
    std::vector<DecodeRow> rows;
    for (int s = 0; s < S; ++s) rows.push_back({s, 3 + s + i, tokens[s][3 + s + i]});
    const float* logits = dec->run(rows.data(), S, all.data(), S);
    for (int s = 0; s < S; ++s)
      EXPECT_LT(relative_error(logits + s * V, refs[s].data() + (3 + s + i) * V, V), kTolerance)
          << "stream " << s << " step " << i;
  }
}

TEST(CudaDecoder, RowsOutsideItsLimitsAreRefused) {
  Case k = make_case(1, 2, 64, 100, 8);
  auto dec = make_cuda_gpt_decoder(k.config, k.params.data(), 2, 4);
  const int32_t zero = 0;
  DecodeRow gap{0, 3, 1};  // nothing cached yet
  EXPECT_THROW(dec->run(&gap, 1, &zero, 1), std::exception);
  DecodeRow past{0, 8, 1};  // beyond the context
  EXPECT_THROW(dec->run(&past, 1, &zero, 1), std::exception);
  DecodeRow token{1, 0, 100};  // outside the vocabulary
  EXPECT_THROW(dec->run(&token, 1, &zero, 1), std::exception);
  DecodeRow ok{1, 0, 5};
  EXPECT_NO_THROW(dec->run(&ok, 1, &zero, 1));
}

// The GptDecoder interface on the GPU against the CPU decoder: the same calls (prompts of
// different lengths in chunks of max_rows, then steps where some streams idle) give the
// same logits within bf16 rounding.
TEST(CudaDecoder, FeedMatchesTheCpuDecoderWithChunksAndIdleStreams) {
  Case k = make_case(2, 4, 128, 300, 64);
  const int64_t V = 300, S = 3;
  GptDecoderOptions o;
  o.streams = S;
  o.context = 48;
  o.max_rows = 5;  // prompts of 7, 3 and 11 tokens go through in chunks
  auto cpu = make_gpt_decoder("cpu", k.config, o);
  auto gpu = make_gpt_decoder("cuda", k.config, o);
  cpu->set_params(k.params.data());
  gpu->set_params(k.params.data());
  std::vector<float> a(S * V, 0.0f), b(S * V, 0.0f);
  const auto prompt = random_tokens(7 + 3 + 11, V, 5);
  const int64_t counts[S] = {7, 3, 11};
  cpu->feed(prompt.data(), counts, a.data());
  gpu->feed(prompt.data(), counts, b.data());
  for (int64_t s = 0; s < S; ++s)
    EXPECT_LT(relative_error(b.data() + s * V, a.data() + s * V, V), kTolerance) << "stream " << s;
  for (int step = 0; step < 12; ++step) {
    int64_t c[S] = {1, step % 3 == 0 ? 0 : 1, 1};  // stream 1 idles every third step
    std::vector<int32_t> t;
    for (int64_t s = 0; s < S; ++s)
      if (c[s]) t.push_back(static_cast<int32_t>((step * 31 + s * 7) % V));
    cpu->feed(t.data(), c, a.data());
    gpu->feed(t.data(), c, b.data());
    for (int64_t s = 0; s < S; ++s) {
      if (!c[s]) continue;
      EXPECT_LT(relative_error(b.data() + s * V, a.data() + s * V, V), kTolerance)
          << "stream " << s << " step " << step;
      EXPECT_EQ(gpu->length(s), cpu->length(s));
    }
  }
  // A full window is refused alike, and a reset stream starts again at position 0.
  int64_t too_many[S] = {0, 0, 48};
  std::vector<int32_t> t48(48, 1);
  EXPECT_THROW(gpu->feed(t48.data(), too_many, b.data()), std::exception);
  gpu->reset(2);
  cpu->reset(2);
  int64_t one[S] = {0, 0, 1};
  const int32_t tok = 9;
  cpu->feed(&tok, one, a.data());
  gpu->feed(&tok, one, b.data());
  EXPECT_LT(relative_error(b.data() + 2 * V, a.data() + 2 * V, V), kTolerance);
}

}  // namespace
}  // namespace aiscale::nn

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (aiscale::parallel::cuda_visible_gpus() == 0) {
    std::printf("no GPU visible: skipped\n");
    return 77;
  }
  return RUN_ALL_TESTS();
}
