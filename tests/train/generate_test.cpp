// Text generation (train/generate.h) through the key/value-cache decoder: the sliding
// window against the training model, end-of-text and --min-tokens, stop sequences, the
// seed, and batches of prompts decoded together.
#include <gtest/gtest.h>

#include <algorithm>
#include <span>
#include <string>
#include <vector>

#include "aiscale/core/error.h"
#include "aiscale/core/rng.h"
#include "aiscale/data/tokenizer.h"
#include "aiscale/nn/models/gpt.h"
#include "aiscale/nn/models/gpt_decoder.h"
#include "aiscale/train/generate.h"

namespace aiscale::train {
namespace {

// A byte-level model (vocabulary 256) with weights far from initialisation, so that its
// greedy choices are clear-cut and its samples varied.
struct ByteModel {
  nn::GptConfig config;
  std::vector<float> params;
  data::ByteTokenizer tok;
  explicit ByteModel(int64_t block = 16) {
    config.n_layer = 2;
    config.n_head = 2;
    config.n_embd = 64;
    config.block_size = block;
    config.vocab_size = 256;
    params = nn::gpt_init_params(config, 7);
    Rng rng(8);
    for (float& x : params) x += 0.2f * rng.normal();
  }
  std::unique_ptr<nn::GptDecoder> decoder(int64_t streams = 1, int64_t context = 0) const {
    nn::GptDecoderOptions o;
    o.streams = streams;
    o.context = context;
    auto d = nn::make_gpt_decoder_cpu(config, o);
    d->set_params(params.data());
    return d;
  }
  std::vector<SampleResult> run(const std::vector<std::vector<int32_t>>& prompts,
                                const SampleOptions& o, int64_t streams = 1,
                                int64_t context = 0, const GenerateCallbacks& cb = {}) const {
    auto d = decoder(streams, context);
    return generate(*d, tok, prompts, o, cb);
  }
};

SampleOptions greedy(int64_t tokens) {
  SampleOptions o;
  o.max_new_tokens = tokens;
  o.sampling.temperature = 0.0f;
  return o;
}

// The window rule of generate.h, replayed on the training model (a full forward per
// token): the prompt's last W tokens; a full window restarts with the last W/2.
std::vector<int32_t> reference_greedy(const ByteModel& m, std::vector<int32_t> prompt,
                                      int64_t W, int64_t tokens) {
  nn::GptRunOptions ro;
  ro.batch = 1;
  ro.seq = m.config.block_size;
  auto model = nn::make_gpt_cpu(m.config, ro);
  model->set_params(m.params.data());
  std::vector<int32_t> history = prompt, window, out;
  const int64_t P = static_cast<int64_t>(prompt.size());
  window.assign(prompt.end() - std::min(P, W), prompt.end());
  std::vector<float> logits(256);
  for (int64_t n = 0; n < tokens; ++n) {
    std::vector<int32_t> padded(size_t(ro.seq), 0);
    std::copy(window.begin(), window.end(), padded.begin());
    model->forward(padded.data(), nullptr);
    model->logits_at(0, static_cast<int64_t>(window.size()) - 1, logits.data());
    const int32_t next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    out.push_back(next);
    history.push_back(next);
    if (static_cast<int64_t>(window.size()) < W) {
      window.push_back(next);
    } else {
      const int64_t keep = slide_keep(W);
      window.assign(history.end() - keep, history.end());
    }
  }
  return out;
}

TEST(Generate, SlidingWindowMatchesTheTrainingModelOverTheSameWindows) {
  const ByteModel m(16);
  for (int64_t W : {16, 7, 1}) {
    for (std::vector<int32_t> prompt : {std::vector<int32_t>{65, 66, 67},
                                        std::vector<int32_t>(20, 100)}) {  // longer than W
      SCOPED_TRACE("context " + std::to_string(W) + ", prompt of " + std::to_string(prompt.size()));
      const auto got = m.run({prompt}, greedy(40), 1, W);
      ASSERT_EQ(got.size(), 1u);
      EXPECT_EQ(got[0].ids, reference_greedy(m, prompt, W, 40));
      EXPECT_EQ(got[0].reason, StopReason::length);
    }
  }
}

TEST(Generate, EndOfTextEndsTheSampleOnlyAfterMinTokens) {
  const ByteModel m;
  SampleOptions o = greedy(12);
  const std::vector<int32_t> free_run = m.run({{1, 2, 3}}, o)[0].ids;
  ASSERT_EQ(free_run.size(), 12u);

  o.end_of_text = free_run[0];  // the first generated token ends the sample at once...
  auto r = m.run({{1, 2, 3}}, o)[0];
  EXPECT_EQ(r.ids, std::vector<int32_t>{free_run[0]});
  EXPECT_EQ(r.reason, StopReason::end_of_text);
  EXPECT_EQ(r.text, "");
  o.min_new_tokens = 4;  // ...unless at least 4 tokens are asked for: then it is a newline
  r = m.run({{1, 2, 3}}, o)[0];
  ASSERT_GE(r.ids.size(), 4u);
  EXPECT_TRUE(std::equal(r.ids.begin(), r.ids.begin() + 4, free_run.begin()));
  EXPECT_EQ(r.text[0], '\n');
  if (r.ids.size() < 12) {
    EXPECT_EQ(r.ids.back(), o.end_of_text);
    EXPECT_EQ(r.reason, StopReason::end_of_text);
  }
  o.min_new_tokens = 100;  // never ends early: runs to max_new_tokens
  EXPECT_EQ(m.run({{1, 2, 3}}, o)[0].ids.size(), 12u);
}

TEST(Generate, StopSequenceSpanningTokensEndsTheTextBeforeIt) {
  const ByteModel m;
  SampleOptions o = greedy(30);
  const SampleResult free_run = m.run({{72, 105}}, o)[0];
  // The text of tokens 10..13 of the free run: a stop sequence spanning four tokens.
  std::vector<size_t> end_of;  // bytes of text after each token
  std::string full;
  for (int32_t id : free_run.ids) {
    full += m.tok.decode(std::span(&id, 1));
    end_of.push_back(full.size());
  }
  ASSERT_EQ(full, free_run.text);
  o.stop = {full.substr(end_of[9], end_of[13] - end_of[9]), "never-appears"};
  std::string shown;
  GenerateCallbacks cb;
  cb.on_text = [&](int64_t, std::string_view t) { shown += t; };
  const SampleResult r = m.run({{72, 105}}, o, 1, 0, cb)[0];
  const size_t at = full.find(o.stop[0]);  // its first occurrence may lie earlier
  EXPECT_EQ(r.text, full.substr(0, at));
  EXPECT_EQ(r.reason, StopReason::stop_sequence);
  EXPECT_EQ(r.stop_sequence, o.stop[0]);
  // Generation ran until the stop text was complete, not a token longer.
  const size_t needed = std::lower_bound(end_of.begin(), end_of.end(), at + o.stop[0].size()) -
                        end_of.begin() + 1;
  EXPECT_EQ(r.ids.size(), needed);
  EXPECT_EQ(shown, r.text);  // no byte of the stop text was ever shown
}

TEST(Generate, SameSeedSameTextAndEachStreamItsOwnGenerator) {
  const ByteModel m;
  SampleOptions o;
  o.max_new_tokens = 24;
  o.seed = 99;
  const std::vector<std::vector<int32_t>> prompts = {{65}, {65}, {66, 67}};
  const auto a = m.run(prompts, o, 3);
  const auto b = m.run(prompts, o, 3);
  ASSERT_EQ(a.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(a[i].ids, b[i].ids) << i;
    EXPECT_EQ(a[i].index, static_cast<int64_t>(i));
  }
  EXPECT_NE(a[0].ids, a[1].ids);  // the same prompt, another random stream
  o.seed = 100;
  EXPECT_NE(m.run(prompts, o, 3)[0].ids, a[0].ids);
}

TEST(Generate, BatchesAndQueuesGiveEachPromptItsOwnText) {
  const ByteModel m(32);
  SampleOptions o;
  o.max_new_tokens = 20;
  o.sampling.top_k = 20;
  o.sampling.top_p = 0.9f;
  o.seed = 5;
  o.end_of_text = 0;
  o.min_new_tokens = 8;  // streams end at different steps: a freed stream takes a waiting prompt
  const std::vector<std::vector<int32_t>> prompts = {{72}, {}, {1, 2, 3, 4, 5}, {200, 201}, {9}};
  std::vector<int64_t> order;
  GenerateCallbacks cb;
  cb.on_done = [&](const SampleResult& r) { order.push_back(r.index); };
  const auto batched = m.run(prompts, o, 2, 0, cb);  // five prompts through two streams
  ASSERT_EQ(batched.size(), prompts.size());
  ASSERT_EQ(order.size(), prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    SCOPED_TRACE("prompt " + std::to_string(i));
    // Alone, with the seed the batch gave this prompt's stream: the same text.
    SampleOptions alone = o;
    alone.seed = stream_seed(o.seed, static_cast<int64_t>(i));
    const auto single = m.run({prompts[i]}, alone, 1);
    EXPECT_EQ(batched[i].ids, single[0].ids);
    EXPECT_EQ(batched[i].text, single[0].text);
    EXPECT_EQ(batched[i].index, static_cast<int64_t>(i));
  }
  EXPECT_EQ(stream_seed(7, 0), 7u);
}

TEST(Generate, RefusesImpossibleOptions) {
  const ByteModel m;
  SampleOptions o = greedy(4);
  o.stop = {""};
  EXPECT_THROW(m.run({{1}}, o), Error);
  o = greedy(0);
  EXPECT_THROW(m.run({{1}}, o), Error);
  o = greedy(4);
  o.sampling.top_p = 0.0f;
  EXPECT_THROW(m.run({{1}}, o), Error);
  o = greedy(4);
  EXPECT_THROW(m.run({{}}, o), Error);  // an empty prompt needs an end-of-text token
}

}  // namespace
}  // namespace aiscale::train
