// The CPU GPT model's llama family against a plain PyTorch Llama (grouped-query attention,
// untied LM head, Llama 3 rotary scaling): logits, loss, every parameter gradient and the
// losses of 10 AdamW steps (tests/fixtures/make_llama_fixture.py). Also with the
// recomputation modes, which must not change the numbers.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <tuple>

#include "aiscale/nn/models/gpt.h"
#include "aiscale/nn/models/gpt_layout.h"
#include "llama_fixture.h"

using namespace aiscale;

namespace {

double rel_max_err(const float* a, const float* b, size_t n) {
  double err = 0, ref = 1e-12;
  for (size_t i = 0; i < n; ++i) {
    err = std::max(err, std::abs(static_cast<double>(a[i]) - b[i]));
    ref = std::max(ref, std::abs(static_cast<double>(b[i])));
  }
  return err / ref;
}

// backend, recompute mode (0 none, 1 norms and SwiGLU, 2 whole layers)
class LlamaFixtureTest : public ::testing::TestWithParam<std::tuple<const char*, int>> {};

TEST_P(LlamaFixtureTest, MatchesPyTorch) {
  auto f = fixtures::load_llama_fixture(fixtures::llama_fixture_path());
  ASSERT_TRUE(f.config.llama());
  ASSERT_LT(f.config.kv_heads(), f.config.n_head);  // grouped-query attention
  ASSERT_FALSE(f.config.tied());
  ASSERT_TRUE(f.config.rope_scaling.enabled());
  nn::GptRunOptions o;
  o.batch = f.B;
  o.seq = f.T;
  o.cpu_backend = std::get<0>(GetParam());
  o.recompute = std::get<1>(GetParam()) == 1;
  o.recompute_layers = std::get<1>(GetParam()) == 2;
  auto model = nn::make_gpt_cpu(f.config, o);
  model->set_params(f.params.data());

  float loss = model->forward(f.inputs.data(), f.targets.data());
  EXPECT_NEAR(loss, f.loss, 1e-5 * std::abs(f.loss));
  const int64_t V = f.config.vocab_size;
  std::vector<float> row(V);
  double logit_err = 0;
  for (int64_t b = 0; b < f.B; ++b)
    for (int64_t t = 0; t < f.T; ++t) {
      model->logits_at(b, t, row.data());
      logit_err = std::max(logit_err, rel_max_err(row.data(), &f.logits[(b * f.T + t) * V], V));
    }
  EXPECT_LT(logit_err, 1e-5);

  model->zero_grad();
  model->backward(1.0f);
  std::vector<float> grads(f.params.size());
  model->get_grads(grads.data());
  // Per tensor, so that a failure names the parameter.
  ASSERT_EQ(nn::GptLayout(f.config).size(), static_cast<int64_t>(grads.size()));
  for (const auto& p : nn::gpt_param_infos(f.config)) {
    const size_t n = static_cast<size_t>(p.shape.numel()), at = static_cast<size_t>(p.offset);
    EXPECT_LT(rel_max_err(&grads[at], &f.grads[at], n), 2e-4) << "gradient of " << p.name;
  }

  auto fresh = nn::make_gpt_cpu(f.config, o);
  fresh->set_params(f.params.data());
  ops::AdamWParams hp;
  hp.lr = f.lr;
  hp.beta1 = f.beta1;
  hp.beta2 = f.beta2;
  hp.eps = f.eps;
  hp.weight_decay = f.weight_decay;
  for (int64_t s = 0; s < f.steps; ++s) {
    fresh->zero_grad();
    float l = fresh->forward(f.inputs.data(), f.targets.data());
    fresh->backward(1.0f);
    hp.step = s + 1;
    fresh->update(hp);
    EXPECT_NEAR(l, f.step_losses[s], 2e-5 * std::abs(f.step_losses[s])) << "step " << s + 1;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Backends, LlamaFixtureTest,
    ::testing::Combine(::testing::Values("reference", "cpu"), ::testing::Values(0, 1, 2)),
    [](const auto& info) {
      return std::string(std::get<0>(info.param)) + "_recompute" +
             std::to_string(std::get<1>(info.param));
    });

// A tied llama (the LM head is embed_tokens): the head's gradient lands in the embedding,
// and the untied layout's lm_head tensor is absent.
TEST(LlamaCpu, TiedHeadSharesTheEmbedding) {
  auto f = fixtures::load_llama_fixture(fixtures::llama_fixture_path());
  nn::GptConfig tied = f.config;
  tied.tie_embeddings = true;
  const nn::GptLayout untied_layout(f.config), tied_layout(tied);
  ASSERT_EQ(tied_layout.size(), untied_layout.size() - f.config.vocab_size * f.config.n_embd);
  // Tied params: the fixture's without lm_head; the logits then use embed_tokens.
  std::vector<float> params(f.params.begin(), f.params.begin() + tied_layout.size());
  nn::GptRunOptions o;
  o.batch = f.B;
  o.seq = f.T;
  auto model = nn::make_gpt_cpu(tied, o);
  model->set_params(params.data());
  model->forward(f.inputs.data(), f.targets.data());
  // Same model with an untied head holding a copy of the embedding: the same logits.
  std::vector<float> copy = f.params;
  const int64_t VC = f.config.vocab_size * f.config.n_embd;
  std::copy(copy.begin(), copy.begin() + VC, copy.begin() + untied_layout.lm_head());
  auto twin = nn::make_gpt_cpu(f.config, o);
  twin->set_params(copy.data());
  twin->forward(f.inputs.data(), f.targets.data());
  std::vector<float> a(f.config.vocab_size), b(f.config.vocab_size);
  model->logits_at(1, 3, a.data());
  twin->logits_at(1, 3, b.data());
  EXPECT_LT(rel_max_err(a.data(), b.data(), a.size()), 1e-6);
  // The tied gradient of embed_tokens is the twin's embed_tokens + lm_head gradients.
  model->zero_grad();
  model->backward(1.0f);
  twin->zero_grad();
  twin->backward(1.0f);
  std::vector<float> gt(tied_layout.size()), gu(untied_layout.size());
  model->get_grads(gt.data());
  twin->get_grads(gu.data());
  for (int64_t i = 0; i < VC; ++i) gu[i] += gu[untied_layout.lm_head() + i];
  EXPECT_LT(rel_max_err(gt.data(), gu.data(), static_cast<size_t>(VC)), 1e-5);
}

// There is no position embedding; order reaches the model through the rotary positions
// only. The last position sees the same set of tokens in both inputs: without rotary
// positions, causal attention would give it the same logits.
TEST(LlamaCpu, HasNoPositionEmbeddingButSeesOrder) {
  auto f = fixtures::load_llama_fixture(fixtures::llama_fixture_path());
  EXPECT_EQ(nn::GptLayout(f.config).layers_begin(), nn::GptLayout(f.config).wpe());
  nn::GptRunOptions o;
  o.batch = 1;
  o.seq = 4;
  auto model = nn::make_gpt_cpu(f.config, o);
  model->set_params(f.params.data());
  const int32_t ab[4] = {5, 9, 5, 9}, ba[4] = {9, 5, 5, 9};
  model->forward(ab, nullptr);
  std::vector<float> x(f.config.vocab_size), y(f.config.vocab_size);
  model->logits_at(0, 3, x.data());
  model->forward(ba, nullptr);
  model->logits_at(0, 3, y.data());
  EXPECT_GT(rel_max_err(x.data(), y.data(), x.size()), 1e-4);
}

}  // namespace
