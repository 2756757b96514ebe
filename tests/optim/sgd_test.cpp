// SGD with momentum, Nesterov and masked weight decay against the update written out by
// hand (PyTorch's torch.optim.SGD form), and the learning-rate schedule's shape.
#include <gtest/gtest.h>

#include <cmath>

#include "aiscale/optim/sgd.h"

namespace aiscale::optim {
namespace {

TEST(Sgd, MomentumAndMaskedWeightDecayMatchTheFormula) {
  for (bool nesterov : {false, true}) {
    SgdOptions o{0.9, nesterov, 0.01};
    Sgd sgd(2, o, {1, 0});  // decay on the first value only
    float p[2] = {1.0f, -2.0f};
    double want_p[2] = {1.0, -2.0}, v[2] = {0, 0};
    const float grads[3][2] = {{0.5f, 0.25f}, {-1.0f, 0.5f}, {0.1f, 0.1f}};
    for (int s = 0; s < 3; ++s) {
      for (int i = 0; i < 2; ++i) {
        double g = grads[s][i] + (i == 0 ? 0.01 * want_p[i] : 0.0);
        v[i] = 0.9 * v[i] + g;
        want_p[i] -= 0.1 * (nesterov ? g + 0.9 * v[i] : v[i]);
      }
      sgd.step(p, grads[s], 0.1);
      EXPECT_NEAR(p[0], want_p[0], 1e-6) << "nesterov " << nesterov << " step " << s;
      EXPECT_NEAR(p[1], want_p[1], 1e-6) << "nesterov " << nesterov << " step " << s;
    }
  }
}

TEST(Sgd, LinearScalingRule) {
  EXPECT_DOUBLE_EQ(linear_scaled_lr(0.1, 256), 0.1);
  EXPECT_DOUBLE_EQ(linear_scaled_lr(0.1, 8192), 3.2);  // Goyal et al.'s 8k batch
  EXPECT_DOUBLE_EQ(linear_scaled_lr(0.1, 64), 0.025);
}

TEST(Sgd, ScheduleWarmupStepAndCosine) {
  LrSchedule s{1.0, 4, 104, "cosine", 0.0, 0, 0.1};
  EXPECT_DOUBLE_EQ(scheduled_lr(s, 0), 0.25);
  EXPECT_DOUBLE_EQ(scheduled_lr(s, 3), 1.0);
  EXPECT_DOUBLE_EQ(scheduled_lr(s, 4), 1.0);
  EXPECT_NEAR(scheduled_lr(s, 54), 0.5, 1e-12);
  EXPECT_NEAR(scheduled_lr(s, 104), 0.0, 1e-12);
  s.decay = "step";
  s.step_every = 30;
  EXPECT_DOUBLE_EQ(scheduled_lr(s, 33), 1.0);
  EXPECT_NEAR(scheduled_lr(s, 34), 0.1, 1e-12);
  EXPECT_NEAR(scheduled_lr(s, 94), 0.001, 1e-12);
  s.decay = "constant";
  EXPECT_DOUBLE_EQ(scheduled_lr(s, 100), 1.0);
}

}  // namespace
}  // namespace aiscale::optim
