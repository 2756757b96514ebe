// AdaSum against a reference written here from its definition, on fixed vectors; the
// compressed exchanges (top-k, int8) with error feedback; the gradient exchange's bytes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numeric>

#include "aiscale/core/error.h"
#include "aiscale/parallel/algorithms/adasum.h"
#include "aiscale/parallel/algorithms/compression.h"
#include "aiscale/parallel/algorithms/gradient_exchange.h"
#include "in_process_ranks.h"

using namespace aiscale;
using namespace aiscale::parallel::algorithms;
using aiscale::testsupport::Fabric;
using aiscale::testsupport::run_ranks;
using aiscale::testsupport::ThreadComm;

namespace {

// The reference: combine(a, b) = (1 - a.b / (2|a|^2)) a + (1 - a.b / (2|b|^2)) b on one
// tensor, in double.
std::vector<double> reference_combine(const std::vector<double>& a, const std::vector<double>& b) {
  double dot = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size(); ++i) dot += a[i] * b[i], aa += a[i] * a[i], bb += b[i] * b[i];
  std::vector<double> out(a.size());
  for (size_t i = 0; i < a.size(); ++i)
    out[i] = (1 - dot / (2 * aa)) * a[i] + (1 - dot / (2 * bb)) * b[i];
  return out;
}

std::vector<float> as_float(const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); }

}  // namespace

TEST(AdaSum, CombineOnFixedVectors) {
  // Orthogonal: the sum. Equal: one of them (the average). In between: hand-computed
  // (a.b = 2, |a|^2 = 4, |b|^2 = 2: 0.75 a + 0.5 b).
  struct Case {
    std::vector<float> a, b, expect;
  };
  for (const Case& c : {Case{{1, 0}, {0, 1}, {1, 1}}, Case{{1, 2}, {1, 2}, {1, 2}},
                        Case{{2, 0}, {1, 1}, {2, 0.5f}}, Case{{0, 0}, {3, 4}, {3, 4}}}) {
    std::vector<float> out(2);
    adasum_combine(c.a.data(), c.b.data(), out.data(), 2, {});
    EXPECT_FLOAT_EQ(out[0], c.expect[0]);
    EXPECT_FLOAT_EQ(out[1], c.expect[1]);
  }
}

TEST(AdaSum, PerTensorSegmentsAreJudgedApart) {
  // Tensor 1 (values 0-1) orthogonal, tensor 2 (values 2-4) identical: sum, then average.
  const std::vector<float> a = {1, 0, 1, 2, 3}, b = {0, 1, 1, 2, 3};
  std::vector<float> out(5);
  adasum_combine(a.data(), b.data(), out.data(), 5, {0, 2});
  EXPECT_EQ(out, (std::vector<float>{1, 1, 1, 2, 3}));
  // As one vector they are neither: a.b = 14 of |a|^2 = |b|^2 = 15.
  adasum_combine(a.data(), b.data(), out.data(), 5, {});
  const double c = 1 - 14.0 / 30.0;
  EXPECT_FLOAT_EQ(out[0], static_cast<float>(c));
  EXPECT_FLOAT_EQ(out[4], static_cast<float>(c * 6));
}

TEST(AdaSum, RecursiveDoublingMatchesTheReferenceTree) {
  // Four ranks, two tensors (3 and 4 values): the reference combines (0,1) and (2,3), then
  // the two results, tensor by tensor.
  const std::vector<std::vector<double>> g = {{0.5, -1, 2, 0.25, 0, 1, -3},
                                              {1, 1, -1, 0.5, 2, -1, 1},
                                              {-2, 0.5, 0.5, 1, 1, 1, 1},
                                              {0.75, -0.5, 3, -1, 0.5, 2, 0}};
  const std::vector<int64_t> offsets = {0, 3};
  auto part = [](const std::vector<double>& v, size_t b, size_t e) {
    return std::vector<double>(v.begin() + static_cast<long>(b), v.begin() + static_cast<long>(e));
  };
  std::vector<double> expect;
  for (auto [b, e] : {std::pair<size_t, size_t>{0, 3}, {3, 7}}) {
    auto low = reference_combine(part(g[0], b, e), part(g[1], b, e));
    auto high = reference_combine(part(g[2], b, e), part(g[3], b, e));
    auto both = reference_combine(low, high);
    expect.insert(expect.end(), both.begin(), both.end());
  }
  Fabric fabric;
  std::vector<std::vector<float>> got(4);
  run_ranks(4, [&](int r) {
    ThreadComm comm(fabric, r, 4);
    std::vector<float> v = as_float(g[static_cast<size_t>(r)]);
    adasum_allreduce(comm, v.data(), 7, offsets);
    got[static_cast<size_t>(r)] = v;
  });
  for (int r = 0; r < 4; ++r) {
    for (size_t i = 0; i < 7; ++i) EXPECT_NEAR(got[static_cast<size_t>(r)][i], expect[i], 1e-5) << "rank " << r << " value " << i;
    EXPECT_EQ(std::memcmp(got[0].data(), got[static_cast<size_t>(r)].data(), 7 * 4), 0) << "rank " << r;
  }
}

TEST(AdaSum, RefusesNonPowerOfTwoRanks) {
  Fabric fabric;
  ThreadComm comm(fabric, 0, 3);
  float x = 1;
  try {
    adasum_allreduce(comm, &x, 1, {});
    FAIL() << "3 ranks accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("power-of-two"), std::string::npos) << e.what();
  }
}

TEST(Compression, TopKSendsTheLargestAndKeepsTheRest) {
  CompressedExchange c("topk", 6, 0.34);  // k = ceil(2.04) = 3
  std::vector<float> g = {0.1f, -5, 2, 0.2f, -3, 0.05f};
  const std::vector<float> msg = c.encode(g.data());
  ASSERT_EQ(msg.size(), 6u);
  EXPECT_EQ(c.payload_bytes(), 24);
  std::vector<float> out(6, 0.0f);
  c.decode_add(msg.data(), out.data());
  EXPECT_EQ(out, (std::vector<float>{0, -5, 2, 0, -3, 0}));
  EXPECT_EQ(c.residual(), (std::vector<float>{0.1f, 0, 0, 0.2f, 0, 0.05f}));
  // Error feedback: the next step sends what was left, once it is large enough.
  std::vector<float> g2 = {0.2f, 0, 0, 0.1f, 0, 0};
  const std::vector<float> msg2 = c.encode(g2.data());
  std::fill(out.begin(), out.end(), 0.0f);
  c.decode_add(msg2.data(), out.data());
  EXPECT_FLOAT_EQ(out[0], 0.3f);
  EXPECT_FLOAT_EQ(out[3], 0.3f);
  EXPECT_FLOAT_EQ(out[5], 0.05f);
}

TEST(Compression, Int8RoundsPerBucketAndCarriesTheError) {
  const int64_t n = kInt8Bucket + 5;  // two buckets, the second short
  CompressedExchange c("int8", n, 0.01);
  EXPECT_EQ(c.payload_bytes(), n + 8);
  std::vector<float> g(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) g[static_cast<size_t>(i)] = std::sin(0.37 * double(i)) * (i < kInt8Bucket ? 1.0 : 1000.0);
  const std::vector<float> original = g;
  const std::vector<float> msg = c.encode(g.data());
  std::vector<float> out(static_cast<size_t>(n), 0.0f);
  c.decode_add(msg.data(), out.data());
  for (int64_t i = 0; i < n; ++i) {
    const double scale = i < kInt8Bucket ? 1.0 / 127 : 1000.0 / 127;
    EXPECT_LE(std::abs(out[static_cast<size_t>(i)] - original[static_cast<size_t>(i)]), 0.5 * scale + 1e-6) << i;
    // What was sent plus what is kept is the gradient.
    EXPECT_NEAR(out[static_cast<size_t>(i)] + c.residual()[static_cast<size_t>(i)], original[static_cast<size_t>(i)], 1e-3) << i;
  }
}

TEST(Compression, NonFiniteGradientsStayVisibleAndLeaveNoResidual) {
  for (const char* kind : {"topk", "int8"}) {
    CompressedExchange c(kind, 8, 0.25);
    std::vector<float> g = {1, 2, std::nanf(""), 4, 5, 6, 7, 8};
    const std::vector<float> msg = c.encode(g.data());
    std::vector<float> out(8, 0.0f);
    c.decode_add(msg.data(), out.data());
    bool any_nan = false;
    for (float v : out) any_nan = any_nan || std::isnan(v);
    EXPECT_TRUE(any_nan) << kind;
    for (float r : c.residual()) EXPECT_TRUE(std::isfinite(r)) << kind;
  }
}

TEST(Compression, ExchangeGivesEveryRankTheSameSumOfSummaries) {
  const int world = 3;
  const int64_t n = 1000;
  for (const char* kind : {"topk", "int8"}) {
    Fabric fabric;
    std::vector<std::vector<float>> got(world), expect_sum(1, std::vector<float>(n, 0.0f));
    std::vector<std::vector<float>> summaries(world);
    run_ranks(world, [&](int r) {
      ThreadComm comm(fabric, r, world);
      CompressedExchange c(kind, n, 0.1);
      std::vector<float> g(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) g[static_cast<size_t>(i)] = std::cos(0.1 * double(i * (r + 1)));
      const std::vector<float> before = g;
      c.exchange(comm, g.data());
      got[static_cast<size_t>(r)] = g;
      // This rank's summary: its gradient less what it kept.
      summaries[static_cast<size_t>(r)].resize(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i)
        summaries[static_cast<size_t>(r)][static_cast<size_t>(i)] = before[static_cast<size_t>(i)] - c.residual()[static_cast<size_t>(i)];
    });
    for (int r = 0; r < world; ++r)
      EXPECT_EQ(std::memcmp(got[0].data(), got[static_cast<size_t>(r)].data(), n * 4), 0) << kind << " rank " << r;
    for (int64_t i = 0; i < n; ++i) {
      double s = 0;
      for (int r = 0; r < world; ++r) s += summaries[static_cast<size_t>(r)][static_cast<size_t>(i)];
      EXPECT_NEAR(got[0][static_cast<size_t>(i)], s, 1e-5) << kind << " value " << i;
    }
  }
}

TEST(GradientExchange, BytesOnTheWireAndDivisor) {
  Fabric fabric;
  ThreadComm comm(fabric, 0, 4);
  GradientExchangeOptions o;
  GradientExchange dense(comm, o, 1000);
  EXPECT_EQ(dense.payload_bytes(), 4000);
  EXPECT_EQ(dense.wire_bytes(), 6000);  // 2(p-1)/p of 4000
  EXPECT_EQ(dense.divisor(), 4.0);
  o.compression = "topk";
  o.topk_ratio = 0.1;
  GradientExchange topk(comm, o, 1000);
  EXPECT_EQ(topk.payload_bytes(), 800);
  EXPECT_EQ(topk.wire_bytes(), 2400);
  EXPECT_EQ(topk.describe()["topk_values"], 100);
  o.compression = "int8";
  EXPECT_EQ(GradientExchange(comm, o, 1000).payload_bytes(), 1004);
  o.compression = "none";
  o.mixing = "adasum";
  GradientExchange ada(comm, o, 1000);
  EXPECT_EQ(ada.wire_bytes(), 8000);  // two rounds of the whole gradient
  EXPECT_EQ(ada.divisor(), 1.0);
  o.compression = "int8";
  EXPECT_THROW(GradientExchange(comm, o, 1000), Error);
}
