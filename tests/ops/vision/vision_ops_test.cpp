// The vision op set (ops/vision): the fast CPU path against the reference definitions on
// typical and odd shapes, every backward against central finite differences of
// loss = sum(out * R), and the accumulate / overwrite conventions of the gradients.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "aiscale/core/rng.h"
#include "aiscale/nn/batchnorm_train.h"
#include "aiscale/ops/vision/vision_ops.h"

namespace aiscale::ops::vision {
namespace {

using Floats = std::vector<float>;

// Batch norm in training is a layer of the models (nn/batchnorm_train.h) over these ops.
using nn::batchnorm_eval_forward;
using nn::batchnorm_train_backward;
using nn::batchnorm_train_forward;
using nn::BatchNormSaved;
using nn::BatchNormSpec;

Floats normal(int64_t n, Rng& rng, float scale = 1.0f) {
  Floats x(n);
  for (float& v : x) v = rng.normal() * scale;
  return x;
}

// Largest |got - want| / (|want| + rms(want)): relative for large elements, relative to
// the tensor's typical size for small ones.
double max_error(const Floats& got, const Floats& want) {
  if (got.size() != want.size()) return std::numeric_limits<double>::infinity();
  double ss = 0;
  for (float v : want) ss += double(v) * v;
  const double scale = std::sqrt(ss / std::max<size_t>(want.size(), 1)) + 1e-30;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i]) || !std::isfinite(want[i])) return INFINITY;
    worst = std::max(worst, std::fabs(double(got[i]) - want[i]) / (std::fabs(want[i]) + scale));
  }
  return worst;
}

// One layer at one shape: differentiable inputs, a forward to one output and a backward
// that returns the gradient of each input (parameter gradients from zero).
struct LayerCase {
  std::string name;
  std::vector<Floats*> inputs;
  std::function<Floats(const VisionBackend&)> forward;
  std::function<std::vector<Floats>(const VisionBackend&, const Floats& dout)> backward;
  double tol = 2e-5;     // cpu vs reference
  double fd_tol = 2e-2;  // finite differences vs backward
  float step = 1e-2f;
};

void check_against_reference(const LayerCase& c) {
  SCOPED_TRACE(c.name);
  const VisionBackend& ref = vision_reference_backend();
  const VisionBackend& cpu = vision_cpu_backend();
  const Floats want = c.forward(ref), got = c.forward(cpu);
  EXPECT_LE(max_error(got, want), c.tol) << "forward";
  Rng rng(7);
  const Floats dout = normal(int64_t(want.size()), rng);
  const auto want_grads = c.backward(ref, dout), got_grads = c.backward(cpu, dout);
  ASSERT_EQ(want_grads.size(), got_grads.size());
  for (size_t i = 0; i < want_grads.size(); ++i) {
    EXPECT_LE(max_error(got_grads[i], want_grads[i]), c.tol) << "gradient of input " << i;
  }
}

// Central differences in double of loss = sum(out * R) at sampled elements of each input.
void check_finite_differences(const LayerCase& c, const VisionBackend& backend) {
  SCOPED_TRACE(c.name + " on " + backend.name);
  Rng rng(11);
  const Floats out = c.forward(backend);
  const Floats R = normal(int64_t(out.size()), rng);
  const auto grads = c.backward(backend, R);
  auto loss = [&] {
    const Floats o = c.forward(backend);
    double acc = 0;
    for (size_t i = 0; i < o.size(); ++i) acc += double(o[i]) * R[i];
    return acc;
  };
  for (size_t k = 0; k < c.inputs.size(); ++k) {
    Floats& x = *c.inputs[k];
    double grad_scale = 0;
    for (float g : grads[k]) grad_scale = std::max(grad_scale, double(std::fabs(g)));
    for (int s = 0; s < 12; ++s) {
      const size_t i = size_t(rng.below(x.size()));
      const float saved = x[i];
      x[i] = saved + c.step;
      const double up = loss();
      x[i] = saved - c.step;
      const double down = loss();
      x[i] = saved;
      const double fd = (up - down) / (2.0 * c.step);
      EXPECT_NEAR(grads[k][i], fd, c.fd_tol * (std::fabs(fd) + grad_scale + 1e-3))
          << "input " << k << " element " << i;
    }
  }
}

void check_all(const LayerCase& c) {
  check_against_reference(c);
  check_finite_differences(c, vision_reference_backend());
  check_finite_differences(c, vision_cpu_backend());
}

struct ConvData {
  ConvShape s;
  bool bias;
  Floats inp, weight, b;
};

LayerCase conv_case(ConvData& d, uint64_t seed) {
  Rng rng(seed);
  d.inp = normal(d.s.in_size(), rng);
  d.weight = normal(d.s.weight_size(), rng, 1.0f / std::sqrt(float(d.s.C * d.s.K * d.s.K)));
  d.b = normal(d.s.OC, rng, 0.5f);
  LayerCase c;
  c.name = "conv2d N=" + std::to_string(d.s.N) + " C=" + std::to_string(d.s.C) + " " +
           std::to_string(d.s.H) + "x" + std::to_string(d.s.W) + " OC=" + std::to_string(d.s.OC) +
           " K=" + std::to_string(d.s.K) + " stride=" + std::to_string(d.s.stride) +
           " pad=" + std::to_string(d.s.pad);
  c.inputs = {&d.inp, &d.weight};
  if (d.bias) c.inputs.push_back(&d.b);
  c.forward = [&d](const VisionBackend& be) {
    Floats out(d.s.out_size()), scratch(conv2d_scratch_floats(d.s));
    be.conv2d_forward(out.data(), d.inp.data(), d.weight.data(), d.bias ? d.b.data() : nullptr,
                      d.s, scratch.data());
    return out;
  };
  c.backward = [&d](const VisionBackend& be, const Floats& dout) {
    Floats dinp(d.s.in_size(), NAN), dw(d.s.weight_size(), 0.0f), db(d.s.OC, 0.0f);
    Floats scratch(conv2d_scratch_floats(d.s));
    be.conv2d_backward(dinp.data(), dw.data(), d.bias ? db.data() : nullptr, dout.data(),
                       d.inp.data(), d.weight.data(), d.s, scratch.data());
    std::vector<Floats> g{dinp, dw};
    if (d.bias) g.push_back(db);
    return g;
  };
  return c;
}

TEST(VisionOps, Conv2dShapes) {
  const ConvShape shapes[] = {
      {2, 3, 8, 8, 4, 3, 1, 1},    // 3x3 "same"
      {3, 4, 9, 7, 5, 3, 2, 1},    // odd sizes, stride 2
      {2, 5, 6, 6, 3, 1, 1, 0},    // 1x1
      {2, 4, 8, 8, 6, 1, 2, 0},    // 1x1 stride 2 (a ResNet shortcut)
      {1, 3, 15, 15, 4, 7, 2, 3},  // the ImageNet stem's kernel
  };
  uint64_t seed = 1;
  for (const ConvShape& s : shapes) {
    for (bool bias : {false, true}) {
      ConvData d{s, bias, {}, {}, {}};
      check_all(conv_case(d, seed++));
    }
  }
}

TEST(VisionOps, Conv2dGradientConventions) {
  // dweight and dbias accumulate into what is there; dinp overwrites (NaN pre-fill); a
  // null dinp (the network's input) is skipped.
  ConvData d{{2, 3, 6, 6, 4, 3, 1, 1}, true, {}, {}, {}};
  LayerCase c = conv_case(d, 3);
  Rng rng(5);
  const Floats dout = normal(d.s.out_size(), rng);
  const auto fresh = c.backward(vision_reference_backend(), dout);
  for (const VisionBackend* be : {&vision_reference_backend(), &vision_cpu_backend()}) {
    SCOPED_TRACE(be->name);
    Floats dinp(d.s.in_size(), NAN), dw(d.s.weight_size(), 1.0f), db(d.s.OC, 2.0f);
    Floats scratch(conv2d_scratch_floats(d.s));
    be->conv2d_backward(dinp.data(), dw.data(), db.data(), dout.data(), d.inp.data(),
                        d.weight.data(), d.s, scratch.data());
    for (size_t i = 0; i < dw.size(); ++i) EXPECT_NEAR(dw[i], fresh[1][i] + 1.0f, 1e-4);
    for (size_t i = 0; i < db.size(); ++i) EXPECT_NEAR(db[i], fresh[2][i] + 2.0f, 1e-4);
    EXPECT_LE(max_error(dinp, fresh[0]), 2e-5);
    Floats dw2(d.s.weight_size(), 0.0f);
    be->conv2d_backward(nullptr, dw2.data(), nullptr, dout.data(), d.inp.data(), d.weight.data(),
                        d.s, scratch.data());
    EXPECT_LE(max_error(dw2, fresh[1]), 2e-5);
  }
}

TEST(VisionOps, BatchNormTraining) {
  for (auto [N, C, HW] : {std::tuple<int64_t, int64_t, int64_t>{4, 3, 5}, {2, 6, 49}, {8, 2, 1}}) {
    const int64_t channels = C;  // lambdas may not capture a structured binding (clang 14)
    Rng rng(N * 100 + C);
    BatchNormSpec spec{N, C, HW};
    Floats inp = normal(N * C * HW, rng, 2.0f), gamma = normal(C, rng), beta = normal(C, rng);
    for (float& v : inp) v += 0.5f;  // a non-zero mean
    LayerCase c;
    c.name = "batchnorm N=" + std::to_string(N) + " C=" + std::to_string(C) +
             " HW=" + std::to_string(HW);
    c.inputs = {&inp, &gamma, &beta};
    c.forward = [&](const VisionBackend& be) {
      Floats out(inp.size());
      BatchNormSaved saved;
      batchnorm_train_forward(be, out.data(), inp.data(), gamma.data(), beta.data(), nullptr,
                              nullptr, spec, saved, nullptr);
      return out;
    };
    c.backward = [&](const VisionBackend& be, const Floats& dout) {
      Floats out(inp.size()), dinp(inp.size(), NAN), dg(channels, 0.0f), db(channels, 0.0f);
      BatchNormSaved saved;
      batchnorm_train_forward(be, out.data(), inp.data(), gamma.data(), beta.data(), nullptr,
                              nullptr, spec, saved, nullptr);
      batchnorm_train_backward(be, dinp.data(), dg.data(), db.data(), dout.data(), inp.data(),
                               gamma.data(), spec, saved, nullptr);
      return std::vector<Floats>{dinp, dg, db};
    };
    c.tol = 1e-4;
    c.step = 1e-2f;
    c.fd_tol = 3e-2;
    check_all(c);
  }
}

TEST(VisionOps, BatchNormRunningStatisticsAndEval) {
  const int64_t N = 6, C = 2, HW = 4;
  Rng rng(3);
  BatchNormSpec spec{N, C, HW};
  Floats inp = normal(N * C * HW, rng), gamma{1.0f, 2.0f}, beta{0.0f, -1.0f};
  Floats rm{0.0f, 0.0f}, rv{1.0f, 1.0f}, out(inp.size());
  BatchNormSaved saved;
  batchnorm_train_forward(vision_cpu_backend(), out.data(), inp.data(), gamma.data(), beta.data(),
                          rm.data(), rv.data(), spec, saved, nullptr);
  for (int64_t c = 0; c < C; ++c) {
    double s = 0, q = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < HW; ++i) s += inp[(n * C + c) * HW + i];
    const double mean = s / (N * HW);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < HW; ++i) q += std::pow(inp[(n * C + c) * HW + i] - mean, 2);
    EXPECT_NEAR(rm[c], 0.1 * mean, 1e-6);
    EXPECT_NEAR(rv[c], 0.9 + 0.1 * q / (N * HW - 1), 1e-5);  // unbiased, as PyTorch keeps it
  }
  // Eval with running statistics equal to the batch's reproduces the training output.
  Floats bm(saved.mean), bv(C), eval_out(inp.size());
  for (int64_t c = 0; c < C; ++c) bv[c] = 1.0f / (saved.rstd[c] * saved.rstd[c]) - spec.eps;
  batchnorm_eval_forward(vision_cpu_backend(), eval_out.data(), inp.data(), gamma.data(),
                         beta.data(), bm.data(), bv.data(), spec);
  EXPECT_LE(max_error(eval_out, out), 1e-4);
}

TEST(VisionOps, ReluPoolingAndLoss) {
  Rng rng(21);
  // ReLU
  {
    Floats inp = normal(97, rng);
    for (float& v : inp) v += (v > 0 ? 0.05f : -0.05f);  // keep clear of the kink
    LayerCase c;
    c.name = "relu";
    c.inputs = {&inp};
    c.forward = [&](const VisionBackend& be) {
      Floats out(inp.size());
      be.relu_forward(out.data(), inp.data(), int64_t(inp.size()));
      return out;
    };
    c.backward = [&](const VisionBackend& be, const Floats& dout) {
      Floats out(inp.size()), dinp(dout);  // in place: dinp aliases dout
      be.relu_forward(out.data(), inp.data(), int64_t(inp.size()));
      be.relu_backward(dinp.data(), out.data(), dinp.data(), int64_t(inp.size()));
      return std::vector<Floats>{dinp};
    };
    c.step = 1e-3f;
    check_all(c);
  }
  // Max pooling (3x3 stride 2 pad 1 as in the ImageNet stem; 2x2 stride 2; odd sizes)
  for (PoolShape s : {PoolShape{2, 3, 9, 9, 3, 2, 1}, PoolShape{2, 2, 8, 6, 2, 2, 0},
                      PoolShape{1, 2, 7, 7, 3, 2, 1}}) {
    Floats inp(s.in_size());
    for (size_t i = 0; i < inp.size(); ++i) inp[i] = float((i * 7919) % 1009) * 0.01f;  // distinct
    LayerCase c;
    c.name = "maxpool K=" + std::to_string(s.K) + " H=" + std::to_string(s.H);
    c.inputs = {&inp};
    c.forward = [&, s](const VisionBackend& be) {
      Floats out(s.out_size());
      std::vector<int32_t> arg(s.out_size());
      be.maxpool_forward(out.data(), arg.data(), inp.data(), s);
      return out;
    };
    c.backward = [&, s](const VisionBackend& be, const Floats& dout) {
      Floats out(s.out_size()), dinp(s.in_size(), NAN);
      std::vector<int32_t> arg(s.out_size());
      be.maxpool_forward(out.data(), arg.data(), inp.data(), s);
      be.maxpool_backward(dinp.data(), dout.data(), arg.data(), s);
      return std::vector<Floats>{dinp};
    };
    c.step = 1e-3f;  // values differ by >= 0.01: the maximum does not move
    check_all(c);
  }
  // Global average pooling
  {
    const int64_t N = 3, C = 4, HW = 10;
    Floats inp = normal(N * C * HW, rng);
    LayerCase c;
    c.name = "avgpool";
    c.inputs = {&inp};
    c.forward = [&](const VisionBackend& be) {
      Floats out(N * C);
      be.avgpool_forward(out.data(), inp.data(), N, C, HW);
      return out;
    };
    c.backward = [&](const VisionBackend& be, const Floats& dout) {
      Floats dinp(inp.size(), NAN);
      be.avgpool_backward(dinp.data(), dout.data(), N, C, HW);
      return std::vector<Floats>{dinp};
    };
    check_all(c);
  }
  // Cross-entropy with label smoothing (0: plain), the loss weighted per row by dlosses.
  for (float eps : {0.0f, 0.1f}) {
    const int64_t N = 5, V = 7;
    Floats logits = normal(N * V, rng, 2.0f);
    std::vector<int32_t> targets{0, 6, 3, 3, 1};
    LayerCase c;
    c.name = "xent_smooth eps=" + std::to_string(eps);
    c.inputs = {&logits};
    c.forward = [&, eps](const VisionBackend& be) {
      Floats losses(N);
      be.xent_smooth_forward(losses.data(), logits.data(), targets.data(), N, V, eps);
      return losses;
    };
    c.backward = [&, eps](const VisionBackend& be, const Floats& dlosses) {
      Floats d(logits);  // in place, the usual call
      be.xent_smooth_backward(d.data(), d.data(), targets.data(), dlosses.data(), N, V, eps);
      return std::vector<Floats>{d};
    };
    c.step = 1e-3f;
    c.tol = 1e-5;
    check_all(c);
  }
}

TEST(VisionOps, SmoothedLossMatchesItsDefinition) {
  // eps = 0.3, V = 3, logits (0, ln 2, ln 3): p = (1/6, 2/6, 3/6), target 2.
  const float logits[3] = {0.0f, std::log(2.0f), std::log(3.0f)};
  const int32_t target = 2;
  float loss = 0;
  vision_cpu_backend().xent_smooth_forward(&loss, logits, &target, 1, 3, 0.3f);
  const double want = -(0.1 * std::log(1.0 / 6) + 0.1 * std::log(2.0 / 6) + 0.8 * std::log(0.5));
  EXPECT_NEAR(loss, want, 1e-6);
}

TEST(VisionOps, NamesRoundTrip) {
  for (int i = 0; i < kVisionOpCount; ++i) {
    const auto op = static_cast<VisionOp>(i);
    EXPECT_EQ(vision_op_by_name(vision_op_name(op)), op);
  }
  EXPECT_FALSE(vision_op_by_name("conv3d_forward").has_value());
  EXPECT_THROW(vision_backend_by_name("cuda"), std::exception);
}

}  // namespace
}  // namespace aiscale::ops::vision
