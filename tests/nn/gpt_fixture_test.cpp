// The CPU GPT model against PyTorch: logits, loss, every parameter gradient and the
// losses of 10 AdamW steps (tests/fixtures/make_gpt_fixture.py).
#include <gtest/gtest.h>

#include <cmath>

#include "aiscale/nn/models/gpt.h"
#include "gpt_fixture.h"

using namespace aiscale;

namespace {

// max |a - b| / (max |b| + tiny) over a tensor slice.
double rel_max_err(const float* a, const float* b, size_t n) {
  double err = 0, ref = 1e-12;
  for (size_t i = 0; i < n; ++i) {
    err = std::max(err, std::abs(static_cast<double>(a[i]) - b[i]));
    ref = std::max(ref, std::abs(static_cast<double>(b[i])));
  }
  return err / ref;
}

class GptFixtureTest : public ::testing::TestWithParam<const char*> {};

TEST_P(GptFixtureTest, MatchesPyTorch) {
  auto f = fixtures::load_gpt_fixture(fixtures::fixture_path());
  nn::GptRunOptions o;
  o.batch = f.B;
  o.seq = f.T;
  o.cpu_backend = GetParam();
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
  size_t offset = 0;
  for (const auto& p : nn::gpt_param_infos(f.config)) {
    size_t n = static_cast<size_t>(p.shape.numel());
    double e = rel_max_err(&grads[offset], &f.grads[offset], n);
    EXPECT_LT(e, 2e-4) << "gradient of " << p.name;
    offset += n;
  }

  // AdamW steps on the same batch: the loss before each update.
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

INSTANTIATE_TEST_SUITE_P(Backends, GptFixtureTest, ::testing::Values("reference", "cpu"));

TEST(GptModel, RecomputeGivesIdenticalGradients) {
  auto f = fixtures::load_gpt_fixture(fixtures::fixture_path());
  nn::GptRunOptions o;
  o.batch = f.B;
  o.seq = f.T;
  // Plain, the LayerNorm and GELU outputs recomputed, whole layers recomputed (with and
  // without the other option, which full recomputation makes moot).
  std::vector<std::vector<float>> g(4, std::vector<float>(f.params.size()));
  std::vector<size_t> bytes(4);
  for (int pass = 0; pass < 4; ++pass) {
    o.recompute = pass == 1 || pass == 3;
    o.recompute_layers = pass >= 2;
    auto m = nn::make_gpt_cpu(f.config, o);
    m->set_params(f.params.data());
    m->forward(f.inputs.data(), f.targets.data());
    m->backward(1.0f);
    m->get_grads(g[pass].data());
    bytes[pass] = m->memory_bytes();
  }
  // Recomputation repeats the same arithmetic: bit-identical.
  for (int pass = 1; pass < 4; ++pass) EXPECT_EQ(g[0], g[pass]) << "pass " << pass;
  // Each keeps less: full recomputation one layer's activations plus every layer's input.
  EXPECT_LT(bytes[1], bytes[0]);
  EXPECT_LT(bytes[2], bytes[1]);
  EXPECT_EQ(bytes[2], bytes[3]);
}

TEST(GptModel, GradientAccumulationAddsUp) {
  auto f = fixtures::load_gpt_fixture(fixtures::fixture_path());
  nn::GptRunOptions o;
  o.batch = f.B;
  o.seq = f.T;
  auto m = nn::make_gpt_cpu(f.config, o);
  m->set_params(f.params.data());
  for (int i = 0; i < 2; ++i) {
    m->forward(f.inputs.data(), f.targets.data());
    m->backward(0.5f);
  }
  std::vector<float> g(f.params.size());
  m->get_grads(g.data());
  EXPECT_LT(rel_max_err(g.data(), f.grads.data(), g.size()), 2e-4);
}

TEST(GptConfig, PresetParameterCounts) {
  EXPECT_EQ(nn::gpt_preset("gpt2-124m").num_params(), 124439808);
  EXPECT_EQ(nn::gpt_preset("gpt2-350m").num_params(), 354823168);
  EXPECT_EQ(nn::gpt_preset("gpt2-774m").num_params(), 774030080);
  EXPECT_EQ(nn::gpt_preset("gpt2-1558m").num_params(), 1557611200);
}

}  // namespace
