// Text generation's stop rule: the stop token ends a sample only after min_new_tokens.
#include <gtest/gtest.h>

#include "aiscale/nn/models/gpt.h"
#include "aiscale/train/generate.h"

namespace aiscale::train {
namespace {

struct TinyModel {
  nn::GptConfig config = nn::gpt_preset("gpt-tiny");
  std::unique_ptr<nn::GptModel> model;
  TinyModel() {
    config.vocab_size = 64;
    config.block_size = 16;
    nn::GptRunOptions ro;
    ro.batch = 1;
    ro.seq = 16;
    model = nn::make_gpt_cpu(config, ro);
    model->set_params(nn::gpt_init_params(config, 7).data());
  }
};

TEST(Generate, StopTokenEndsTheSampleOnlyAfterMinNewTokens) {
  TinyModel m;
  SampleOptions o;
  o.max_new_tokens = 6;
  o.temperature = 0.0f;  // greedy: the same tokens every time
  Rng rng(1);
  const std::vector<int32_t> free_run = generate(*m.model, {1, 2, 3}, o, rng);
  ASSERT_EQ(free_run.size(), 6u);

  o.stop_token = free_run[0];  // the first generated token stops at once...
  EXPECT_EQ(generate(*m.model, {1, 2, 3}, o, rng).size(), 1u);
  o.min_new_tokens = 4;        // ...unless at least 4 tokens are asked for
  const std::vector<int32_t> longer = generate(*m.model, {1, 2, 3}, o, rng);
  ASSERT_GE(longer.size(), 4u);
  EXPECT_EQ(std::vector<int32_t>(longer.begin(), longer.begin() + 4),
            std::vector<int32_t>(free_run.begin(), free_run.begin() + 4));
  if (longer.size() < 6) {  // it stopped at a later stop token
    EXPECT_EQ(longer.back(), o.stop_token);
  }
  o.min_new_tokens = 100;      // never stops early: runs to max_new_tokens
  EXPECT_EQ(generate(*m.model, {1, 2, 3}, o, rng).size(), 6u);
}

}  // namespace
}  // namespace aiscale::train
