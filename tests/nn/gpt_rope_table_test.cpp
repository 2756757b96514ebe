// The rotary tables every backend reads (nn/models/gpt_rope.h): theta^(-2i/D), and Llama 3's
// scaling picking the right band for each frequency.
#include <gtest/gtest.h>

#include <cmath>

#include "aiscale/nn/models/gpt_config.h"
#include "aiscale/nn/models/gpt_rope.h"

namespace aiscale {
namespace {

nn::GptConfig rope_config(double factor) {
  nn::GptConfig c = nn::gpt_preset("llama-tiny");
  c.n_embd = 16, c.n_head = 2, c.n_kv_head = 1;  // head size 8: frequencies i = 0..3
  c.rope_theta = 500000.0;
  c.rope_scaling = factor > 0 ? nn::RopeScaling{factor, 1.0, 4.0, 8192} : nn::RopeScaling{};
  return c;
}

TEST(GptRopeTable, InverseFrequenciesWithoutScaling) {
  const auto f = nn::rope_inv_freq(rope_config(0));
  ASSERT_EQ(f.size(), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_DOUBLE_EQ(f[i], std::pow(500000.0, -2.0 * i / 8.0)) << i;
}

// With original context 8192, low 1, high 4: wavelengths under 2048 keep their frequency
// (i = 0: 6.3, i = 1: 167), over 8192 are divided by the factor (i = 3: 118,000), between
// (i = 2: 4,443) interpolated.
TEST(GptRopeTable, Llama3ScalingBands) {
  const auto f = nn::rope_inv_freq(rope_config(8.0));
  const double pi = 3.14159265358979323846;
  const double base[4] = {1.0, std::pow(500000.0, -0.25), std::pow(500000.0, -0.5),
                          std::pow(500000.0, -0.75)};
  EXPECT_DOUBLE_EQ(f[0], base[0]);
  EXPECT_DOUBLE_EQ(f[1], base[1]);
  const double smooth = (8192.0 / (2 * pi / base[2]) - 1.0) / 3.0;
  EXPECT_GT(smooth, 0.0);
  EXPECT_LT(smooth, 1.0);
  EXPECT_NEAR(f[2], (1 - smooth) * base[2] / 8.0 + smooth * base[2], 1e-15);
  EXPECT_DOUBLE_EQ(f[3], base[3] / 8.0);
}

TEST(GptRopeTable, TablesOfCosinesAndSines) {
  const nn::GptConfig c = rope_config(0);
  const nn::RopeTable r = nn::rope_table(c, 5);
  std::vector<float> t(r.cos);
  t.insert(t.end(), r.sin.begin(), r.sin.end());
  ASSERT_EQ(t.size(), 2u * 5 * 4);
  const double a = 3 * std::pow(500000.0, -2.0 / 8.0);  // position 3, pair 1
  EXPECT_FLOAT_EQ(t[3 * 4 + 1], float(std::cos(a)));
  EXPECT_FLOAT_EQ(t[(5 + 3) * 4 + 1], float(std::sin(a)));
  EXPECT_FLOAT_EQ(t[0], 1.0f);       // position 0: cos 1
  EXPECT_FLOAT_EQ(t[5 * 4], 0.0f);   // sin 0
}

}  // namespace
}  // namespace aiscale
