// Choosing tokens from logits (temperature, top-k, top-p) and stop sequences across token
// boundaries (train/sampling.h): pure functions, checked against their definitions.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "aiscale/core/error.h"
#include "aiscale/core/rng.h"
#include "aiscale/train/sampling.h"

namespace aiscale::train {
namespace {

// softmax(logits / T) in double.
std::vector<double> softmax(const std::vector<float>& logits, double T) {
  double m = -INFINITY, sum = 0.0;
  for (float x : logits) m = std::max(m, double(x));
  std::vector<double> p;
  for (float x : logits) sum += p.emplace_back(std::exp((x - m) / T));
  for (double& x : p) x /= sum;
  return p;
}

const std::vector<float> kLogits = {1.0f, 3.0f, -2.0f, 2.5f, 0.0f, 3.0f, 1.5f, -1.0f};

TEST(TokenSampler, GreedyIsTheMostLikelyTokenAndTiesGoToTheLowerId) {
  TokenSampler ts;
  SamplingParams p;
  p.temperature = 0.0f;
  Rng rng(1);
  const auto d = ts.distribution(kLogits.data(), 8, p);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].token, 1);  // 3.0 at ids 1 and 5
  EXPECT_EQ(d[0].probability, 1.0);
  const Rng before = rng;
  EXPECT_EQ(ts.pick(kLogits.data(), 8, p, rng), 1);
  EXPECT_EQ(rng.state, before.state);  // greedy draws no random number
}

TEST(TokenSampler, TemperatureScalesTheLogits) {
  TokenSampler ts;
  for (double T : {0.5, 1.0, 2.0}) {
    SamplingParams p;
    p.temperature = float(T);
    const auto d = ts.distribution(kLogits.data(), 8, p);
    const auto want = softmax(kLogits, T);
    ASSERT_EQ(d.size(), 8u);
    for (size_t i = 0; i < d.size(); ++i) {
      EXPECT_NEAR(d[i].probability, want[size_t(d[i].token)], 1e-12) << T;
      if (i) EXPECT_GE(d[i - 1].probability, d[i].probability);  // most likely first
    }
    EXPECT_EQ(d[0].token, 1);
    EXPECT_EQ(d[1].token, 5);
  }
}

TEST(TokenSampler, TopKKeepsTheKMostLikely) {
  TokenSampler ts;
  SamplingParams p;
  p.top_k = 3;
  const auto d = ts.distribution(kLogits.data(), 8, p);
  ASSERT_EQ(d.size(), 3u);
  EXPECT_EQ(d[0].token, 1);
  EXPECT_EQ(d[1].token, 5);
  EXPECT_EQ(d[2].token, 3);
  const double z = std::exp(3.0) * 2 + std::exp(2.5);
  EXPECT_NEAR(d[2].probability, std::exp(2.5) / z, 1e-12);
  p.top_k = 100;  // more than the vocabulary: all of it
  EXPECT_EQ(ts.distribution(kLogits.data(), 8, p).size(), 8u);
}

TEST(TokenSampler, TopPKeepsTheFewestTokensReachingP) {
  TokenSampler ts;
  const auto all = softmax(kLogits, 1.0);
  // Sorted probabilities: ids 1, 5 (equal), 3, 6, 0, 4, 7, 2.
  const int order[] = {1, 5, 3, 6, 0, 4, 7, 2};
  double cum = 0.0;
  for (int n = 1; n <= 8; ++n) {
    cum += all[size_t(order[n - 1])];
    SamplingParams p;
    // Just below the mass of the n most likely: n are kept; just above: n + 1.
    p.top_p = float(cum - 1e-4);
    auto d = ts.distribution(kLogits.data(), 8, p);
    EXPECT_EQ(d.size(), size_t(n)) << "top_p " << p.top_p;
    double kept = 0.0;
    for (int i = 0; i < n; ++i) {
      EXPECT_EQ(d[size_t(i)].token, order[i]);
      kept += all[size_t(order[i])];
    }
    EXPECT_NEAR(d[0].probability, all[1] / kept, 1e-9);  // renormalised over the nucleus
    if (n < 8 && cum + 1e-4 < 1.0) {
      p.top_p = float(cum + 1e-4);
      EXPECT_EQ(ts.distribution(kLogits.data(), 8, p).size(), size_t(n + 1));
    }
  }
}

TEST(TokenSampler, TopPAfterTopKAndOverALargeVocabulary) {
  TokenSampler ts;
  // 50,000 tokens of slowly falling logits: the nucleus is larger than the first sorted
  // block of a few hundred, so the sort has to widen.
  std::vector<float> logits(50000);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = -0.001f * float((i * 7919) % 50000);
  SamplingParams p;
  p.top_p = 0.5f;
  const auto d = ts.distribution(logits.data(), 50000, p);
  const auto all = softmax(logits, 1.0);
  double mass = 0.0;
  for (const auto& t : d) mass += all[size_t(t.token)];
  EXPECT_GE(mass, 0.5);
  EXPECT_LT(mass - all[size_t(d.back().token)], 0.5);  // one fewer would fall short
  EXPECT_GT(d.size(), 256u);  // beyond the first sorted block
  p.top_k = 10;  // top-k first, then the nucleus of those ten
  const auto dk = ts.distribution(logits.data(), 50000, p);
  EXPECT_LE(dk.size(), 10u);
  EXPECT_EQ(dk[0].token, d[0].token);
}

TEST(TokenSampler, PicksFollowTheDistributionAndTheSeed) {
  TokenSampler ts;
  SamplingParams p;
  p.temperature = 0.8f;
  p.top_k = 6;
  p.top_p = 0.95f;
  const auto d = ts.distribution(kLogits.data(), 8, p);
  std::vector<double> freq(8, 0.0);
  Rng rng(42);
  const int n = 40000;
  for (int i = 0; i < n; ++i) freq[size_t(ts.pick(kLogits.data(), 8, p, rng))] += 1.0 / n;
  double kept = 0.0;
  for (const auto& t : d) {
    EXPECT_NEAR(freq[size_t(t.token)], t.probability, 0.01) << "token " << t.token;
    kept += freq[size_t(t.token)];
  }
  EXPECT_NEAR(kept, 1.0, 1e-9);  // nothing outside the kept set is ever drawn
  Rng a(7), b(7);
  for (int i = 0; i < 100; ++i)
    EXPECT_EQ(ts.pick(kLogits.data(), 8, p, a), ts.pick(kLogits.data(), 8, p, b));
}

TEST(TokenSampler, RefusesImpossibleParameters) {
  SamplingParams p;
  p.top_p = 0.0f;
  EXPECT_THROW(check_sampling_params(p), Error);
  p.top_p = 1.5f;
  EXPECT_THROW(check_sampling_params(p), Error);
  p = SamplingParams{};
  p.temperature = -1.0f;
  EXPECT_THROW(check_sampling_params(p), Error);
  p.temperature = NAN;
  EXPECT_THROW(check_sampling_params(p), Error);
  p = SamplingParams{};
  p.top_k = -2;
  EXPECT_THROW(check_sampling_params(p), Error);
  EXPECT_NO_THROW(check_sampling_params(SamplingParams{}));
}

TEST(StopText, MatchesAcrossTokenBoundariesAndNeverShowsTheStopText) {
  StopText t({"world", "\n\n"});
  EXPECT_FALSE(t.append("hello "));
  EXPECT_EQ(t.final_length(), 6u);
  EXPECT_FALSE(t.append("wor"));  // could become "world": held back
  EXPECT_EQ(t.final_length(), 6u);
  EXPECT_FALSE(t.append("m"));    // "worm" cannot: final again
  EXPECT_EQ(t.final_length(), 10u);
  EXPECT_FALSE(t.append(" w"));
  EXPECT_EQ(t.final_length(), 11u);
  EXPECT_FALSE(t.append("o"));
  EXPECT_TRUE(t.append("rld, and more"));  // the stop text and what follows are cut
  EXPECT_TRUE(t.stopped());
  EXPECT_EQ(t.text(), "hello worm ");
  EXPECT_EQ(t.matched(), "world");
  EXPECT_EQ(t.final_length(), t.text().size());
}

TEST(StopText, TheLeftmostOfSeveralMatchesWins) {
  StopText t({"cd", "b"});
  EXPECT_TRUE(t.append("abcd"));
  EXPECT_EQ(t.text(), "a");
  EXPECT_EQ(t.matched(), "b");
  StopText one_byte_at_a_time({"\n\n"});
  for (char c : std::string("line\n")) EXPECT_FALSE(one_byte_at_a_time.append(std::string(1, c)));
  EXPECT_EQ(one_byte_at_a_time.final_length(), 4u);  // the newline may start "\n\n"
  EXPECT_TRUE(one_byte_at_a_time.append("\n"));
  EXPECT_EQ(one_byte_at_a_time.text(), "line");
  StopText none;
  EXPECT_FALSE(none.append("anything"));
  EXPECT_EQ(none.final_length(), 8u);
}

TEST(Unescape, ControlCharactersForStopOptions) {
  EXPECT_EQ(unescape("a\\nb"), "a\nb");
  EXPECT_EQ(unescape("\\t\\r\\\\\\\""), "\t\r\\\"");
  EXPECT_EQ(unescape("\\q"), "\\q");  // unknown: kept as written
  EXPECT_EQ(unescape("end\\"), "end\\");
}

}  // namespace
}  // namespace aiscale::train
