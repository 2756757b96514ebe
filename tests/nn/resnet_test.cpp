// The ResNet models: parameter counts against the published ones, torchvision's parameter
// names and order, the whole network's gradients against finite differences and the
// reference backend, evaluation with running statistics, and learning a small task.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "aiscale/core/rng.h"
#include "aiscale/nn/models/resnet.h"
#include "aiscale/optim/sgd.h"

namespace aiscale::nn {
namespace {

TEST(ResNet, ParameterCountsMatchThePublishedModels) {
  // torchvision.models.resnet{18,34,50}(num_classes=1000): 11.69M, 21.80M, 25.56M.
  EXPECT_EQ(resnet_parameter_count(resnet_preset("resnet18")), 11689512);
  EXPECT_EQ(resnet_parameter_count(resnet_preset("resnet34")), 21797672);
  EXPECT_EQ(resnet_parameter_count(resnet_preset("resnet50")), 25557032);
  EXPECT_EQ(resnet_parameter_count(resnet_preset("resnet-small")), 174970);
  EXPECT_THROW(resnet_preset("resnet101x"), std::exception);
}

TEST(ResNet, TorchvisionNamesInOrder) {
  ResNetConfig c = resnet_preset("resnet50");
  c.image_size = 32;
  ResNetOptions o;
  o.max_batch = 0;
  ResNet m(c, o, ops::vision::vision_cpu_backend());
  const auto& t = m.parameter_tensors();
  ASSERT_GE(t.size(), 12u);
  EXPECT_EQ(t[0].name, "conv1.weight");
  EXPECT_EQ(t[0].shape, (std::vector<int64_t>{64, 3, 7, 7}));
  EXPECT_EQ(t[1].name, "bn1.weight");
  EXPECT_EQ(t[3].name, "layer1.0.conv1.weight");
  EXPECT_EQ(t[9].name, "layer1.0.conv3.weight");
  EXPECT_EQ(t[12].name, "layer1.0.downsample.0.weight");
  EXPECT_EQ(t[t.size() - 2].name, "fc.weight");
  EXPECT_EQ(t.back().name, "fc.bias");
  EXPECT_TRUE(t[0].decay);
  EXPECT_FALSE(t[1].decay);
  EXPECT_FALSE(t.back().decay);
  EXPECT_EQ(m.buffer_tensors()[0].name, "bn1.running_mean");
}

ResNetConfig tiny_config() {
  ResNetConfig c = resnet_preset("resnet-small");
  c.image_size = 8;
  c.stem_channels = 4;
  c.widths = {4, 6};
  c.blocks = {1, 1};
  c.num_classes = 5;
  return c;
}

void fill_batch(std::vector<float>& x, std::vector<int32_t>& y, int64_t n, const ResNetConfig& c,
                uint64_t seed) {
  Rng rng(seed);
  x.resize(n * c.in_channels * c.image_size * c.image_size);
  y.resize(n);
  for (float& v : x) v = rng.normal();
  for (auto& l : y) l = int32_t(rng.below(uint64_t(c.num_classes)));
}

TEST(ResNet, GradientsMatchFiniteDifferencesAndTheReference) {
  for (bool bottleneck : {false, true}) {
    ResNetConfig c = tiny_config();
    c.bottleneck = bottleneck;
    ResNetOptions o;
    o.max_batch = 6;
    o.label_smoothing = 0.1f;
    o.seed = 5;
    ResNet cpu(c, o, ops::vision::vision_cpu_backend());
    ResNet ref(c, o, ops::vision::vision_reference_backend());
    std::vector<float> x;
    std::vector<int32_t> y;
    fill_batch(x, y, 6, c, 9);
    const double loss = cpu.forward(x.data(), y.data(), 6, true);
    cpu.zero_grad();
    cpu.backward();
    EXPECT_NEAR(ref.forward(x.data(), y.data(), 6, true), loss, 1e-5);
    ref.zero_grad();
    ref.backward();
    double worst = 0, scale = 0;
    for (size_t i = 0; i < cpu.grads().size(); ++i) {
      worst = std::max(worst, double(std::fabs(cpu.grads()[i] - ref.grads()[i])));
      scale = std::max(scale, double(std::fabs(ref.grads()[i])));
    }
    EXPECT_LE(worst, 1e-4 * scale) << "cpu vs reference gradients, bottleneck " << bottleneck;

    // Central differences of the loss (reference backend, double accumulation) at sampled
    // parameters of every tensor, at two steps: where they disagree with each other a ReLU
    // kink lies within the step and the point says nothing (Caffe's kink rule). A kink just
    // inside the smaller step still bends a few points (a whole channel moves with a batch
    // norm shift), so: at most one point in ten beyond the tight tolerance, none beyond 25 %.
    std::vector<float>& p = ref.params();
    Rng rng(3);
    int checked = 0, off = 0;
    auto fd_at = [&](int64_t i, float h) {
      const float saved = p[i];
      p[i] = saved + h;
      const double up = ref.forward(x.data(), y.data(), 6, true);
      p[i] = saved - h;
      const double down = ref.forward(x.data(), y.data(), 6, true);
      p[i] = saved;
      return (up - down) / (2 * h);
    };
    for (const ResNetTensor& t : ref.parameter_tensors()) {
      for (int s = 0; s < 3; ++s) {
        const int64_t i = t.offset + int64_t(rng.below(uint64_t(t.size)));
        const double fd = fd_at(i, 3e-4f), fd_small = fd_at(i, 1e-4f);
        const double tol = 0.03 * std::fabs(fd) + 1e-3 * scale + 1e-5;
        if (std::fabs(fd - fd_small) > tol) continue;  // a kink
        ++checked;
        const double err = std::fabs(ref.grads()[i] - fd);
        off += err > tol;
        EXPECT_LE(err, 0.25 * std::fabs(fd) + 1e-3 * scale + 1e-5)
            << t.name << " bottleneck " << bottleneck << ": backward " << ref.grads()[i]
            << ", finite differences " << fd;
      }
    }
    EXPECT_GE(checked, int(ref.parameter_tensors().size()) * 2) << "too many kinks to judge";
    EXPECT_LE(off * 10, checked) << off << " of " << checked << " points beyond 3 %";
  }
}

TEST(ResNet, EvalUsesRunningStatistics) {
  ResNetConfig c = tiny_config();
  ResNetOptions o;
  o.max_batch = 4;
  o.bn_momentum = 1.0f;  // running statistics = the last batch's
  ResNet m(c, o, ops::vision::vision_cpu_backend());
  std::vector<float> x;
  std::vector<int32_t> y;
  fill_batch(x, y, 4, c, 1);
  const double train_loss = m.forward(x.data(), y.data(), 4, true);
  std::vector<float> train_logits(m.logits(), m.logits() + 4 * c.num_classes);
  // With momentum 1 the running mean is the batch mean and the running variance the
  // unbiased batch variance: eval differs from training only by that n/(n-1) factor.
  const double eval_loss = m.forward(x.data(), y.data(), 4, false);
  EXPECT_NEAR(eval_loss, train_loss, 0.1 * std::fabs(train_loss));
  // A single image in eval is still normalised (no batch statistics needed).
  EXPECT_TRUE(std::isfinite(m.forward(x.data(), y.data(), 1, false)));
  EXPECT_THROW(m.forward(x.data(), y.data(), 5, true), std::exception);
  std::vector<int32_t> bad{0, 1, 7, 0};
  EXPECT_THROW(m.forward(x.data(), bad.data(), 4, true), std::exception);
}

TEST(ResNet, LearnsASmallTask) {
  // Images whose class is the quadrant holding a bright spot: SGD must fit 32 of them.
  ResNetConfig c = tiny_config();
  c.num_classes = 4;
  ResNetOptions o;
  o.max_batch = 32;
  o.seed = 2;
  ResNet m(c, o, ops::vision::vision_cpu_backend());
  std::vector<float> x(32 * 64, 0.0f);
  std::vector<int32_t> y(32);
  Rng rng(4);
  for (int i = 0; i < 32; ++i) {
    y[i] = i % 4;
    for (int k = 0; k < 64; ++k) x[i * 64 + k] = 0.1f * rng.normal();
    const int r = (y[i] / 2) * 4 + int(rng.below(4)), col = (y[i] % 2) * 4 + int(rng.below(4));
    x[i * 64 + r * 8 + col] += 3.0f;
  }
  optim::Sgd sgd(m.num_parameters(), {0.9, true, 0.0});
  const double first = m.forward(x.data(), y.data(), 32, true);
  for (int step = 0; step < 60; ++step) {
    m.forward(x.data(), y.data(), 32, true);
    m.zero_grad();
    m.backward();
    sgd.step(m.params().data(), m.grads().data(), 0.05);
  }
  const double last = m.forward(x.data(), y.data(), 32, true);
  int64_t top1 = 0, top5 = 0;
  m.count_correct(y.data(), 32, top1, top5);
  EXPECT_LT(last, 0.3 * first);
  EXPECT_GE(top1, 30);
  EXPECT_EQ(top5, 32);  // 4 classes: the true one is always among the top 5
}

}  // namespace
}  // namespace aiscale::nn
