// Training FLOP formulas against hand calculations.
#include <gtest/gtest.h>

#include "aiscale/core/error.h"
#include "aiscale/plan/flops.h"

namespace aiscale::plan {
namespace {

TEST(PlanFlops, TransformerIsSixNDPlusAttention) {
  const Workload w = make_workload("gpt2-124m");
  const ComputeEstimate e = transformer_training_flops(w, 1e9);
  // 6 × 124,439,808 × 1e9 + 12 × 12 × 768 × 1024 × 1e9
  const double hand = 6.0 * 124439808 * 1e9 + 12.0 * 12 * 768 * 1024 * 1e9;
  EXPECT_DOUBLE_EQ(hand, 8.59885056e17);
  EXPECT_DOUBLE_EQ(e.flops, hand);
  EXPECT_DOUBLE_EQ(e.flops_per_sample, hand / 1e9);
  EXPECT_EQ(e.formula, "6·N·D + 12·L·d·T·D");
  EXPECT_NE(e.substituted.find("124,439,808"), std::string::npos) << e.substituted;
  EXPECT_NE(e.substituted.find("8.599e17"), std::string::npos) << e.substituted;
}

TEST(PlanFlops, Gpt2XlOnTenBillionTokens) {
  const ComputeEstimate e = transformer_training_flops(make_workload("gpt2-1558m"), 10e9);
  const double hand = 6.0 * 1557611200.0 * 10e9 + 12.0 * 48 * 1600 * 1024 * 10e9;
  EXPECT_DOUBLE_EQ(e.flops, hand);  // ≈ 1.029e20
  EXPECT_NEAR(e.flops / 1e20, 1.029, 0.001);
}

TEST(PlanFlops, CnnWorkedExample) {
  // The counting method of OpenAI's "AI and Compute" appendix (2018,
  // https://openai.com/index/ai-and-compute/) on its ImageNet-scale CNN example:
  // 11.4e9 MACs × 2 × 3 × 1.2e6 images × 128 epochs ≈ 1.05e19 FLOP.
  const ComputeEstimate e = cnn_training_flops(11.4e9, 1.2e6, 128);
  EXPECT_DOUBLE_EQ(e.flops, 11.4e9 * 2 * 3 * 1.2e6 * 128);
  EXPECT_NEAR(e.flops / 1e19, 1.05, 0.01);
  EXPECT_EQ(e.formula, "MACs × 2 × 3 × samples × epochs");
}

TEST(PlanFlops, ResNet50UsesItsCountedMacs) {
  const Workload w = make_workload("resnet50");
  const ComputeEstimate e = training_flops(w, 0, 1281167, 90);
  EXPECT_DOUBLE_EQ(e.flops, w.cnn.macs_per_sample * 6.0 * 1281167 * 90);
}

TEST(PlanFlops, GpuHoursAtAUtilisation) {
  // 1e20 FLOP at 312 TFLOP/s and 40%: 1e20 / 124.8e12 / 3600 = 222.6 GPU-hours.
  const GpuHours h = ideal_gpu_hours(1e20, 312e12, 0.4);
  EXPECT_NEAR(h.hours, 1e20 / (312e12 * 0.4) / 3600.0, 1e-9);
  EXPECT_NE(h.substituted.find("223 GPU-hours"), std::string::npos) << h.substituted;
}

TEST(PlanFlops, NonPositiveAmountsAreRejected) {
  EXPECT_THROW(transformer_training_flops(make_workload("gpt2-124m"), 0), Error);
  EXPECT_THROW(cnn_training_flops(4e9, -1, 90), Error);
  EXPECT_THROW(transformer_training_flops(make_workload("resnet50"), 1e9), Error);
}

}  // namespace
}  // namespace aiscale::plan
