// Planner workloads: exact parameter counts and clear errors for unknown models.
#include <cstdlib>

#include <gtest/gtest.h>

#include "aiscale/core/error.h"
#include "aiscale/plan/resnet.h"
#include "aiscale/plan/workload.h"

namespace aiscale::plan {
namespace {

TEST(PlanWorkload, Gpt2PresetsHaveTheirKnownParameterCounts) {
  // Hugging Face's GPT-2 checkpoints (vocab 50257, context 1024, tied embedding, unpadded).
  EXPECT_EQ(make_workload("gpt2-124m").params(), 124439808);
  EXPECT_EQ(make_workload("gpt2-350m").params(), 354823168);
  EXPECT_EQ(make_workload("gpt2-774m").params(), 774030080);
  EXPECT_EQ(make_workload("gpt2-1558m").params(), 1557611200);
}

TEST(PlanWorkload, LargerPresetsMatchHandCounts) {
  // V·C + T·C + L·(12C² + 13C) + 2C, worked by hand for each shape.
  // gpt2-6.6b: 50257·2560 + 1024·2560 + 84·(12·2560² + 13·2560) + 2·2560
  EXPECT_EQ(make_workload("gpt2-6.6b").params(), 128657920LL + 2621440LL + 6608824320LL + 5120LL);
  EXPECT_EQ(make_workload("gpt2-6.6b").params(), 6740108800LL);
  EXPECT_EQ(make_workload("gpt2-6.6b").gpt.n_layer, 84);
  EXPECT_EQ(make_workload("gpt2-6.6b").gpt.n_head, 40);
  // gpt2-2.7b: 60 layers × 1920, 30 heads.
  EXPECT_EQ(make_workload("gpt2-2.7b").params(), 2754168960LL);
  EXPECT_EQ(make_workload("gpt2-2.7b").gpt.n_head, 30);
  // The engine trains the same shapes (`aiscale train` with model.preset = ...).
  for (const char* name : {"gpt-857m", "gpt2-2.7b", "gpt2-6.6b", "gpt3-175b"})
    EXPECT_EQ(make_workload(name).gpt.num_params(), nn::gpt_preset(name).num_params()) << name;
  EXPECT_EQ(make_workload("gpt-857m").params(), 857866240LL);
  // GPT-3 175B: 96 layers, width 12288, context 2048.
  const Workload g3 = make_workload("gpt3-175b");
  EXPECT_EQ(g3.params(), 174604259328LL);
  EXPECT_EQ(g3.seq_len, 2048);
  EXPECT_EQ(g3.default_global_batch, 1536);
}

TEST(PlanWorkload, Gpt857mIsTheClosestConventionalShapeTo857M) {
  // The sources name a "small ~857M single-GPU configuration" but give no shape. Among
  // GPT-2/GPT-3-style shapes — head size 64 or 128, width a multiple of 128, width/layers
  // between 32 (GPT-2 1558M: 1600/48 = 33) and 128 (GPT-3 6.7B: 4096/32) — with the tied
  // 50257 vocabulary and 1024 positions, the preset must be the one closest to 857M.
  const Workload w = make_workload("gpt-857m");
  EXPECT_EQ(w.gpt.n_layer, 33);
  EXPECT_EQ(w.gpt.n_embd, 1408);
  EXPECT_EQ(w.gpt.n_head, 22);  // head size 64
  EXPECT_EQ(w.params(), 857866240LL);
  int64_t best = 0, best_layers = 0, best_width = 0;
  for (int64_t d = 128; d <= 4096; d += 128)
    for (int64_t layers = 1; layers <= 128; ++layers) {
      if (d < 32 * layers || d > 128 * layers) continue;
      const int64_t n = 50257 * d + 1024 * d + layers * (12 * d * d + 13 * d) + 2 * d;
      if (best == 0 || std::llabs(n - 857000000) < std::llabs(best - 857000000)) {
        best = n;
        best_layers = layers;
        best_width = d;
      }
    }
  EXPECT_EQ(best, w.params());
  EXPECT_EQ(best_layers, 33);
  EXPECT_EQ(best_width, 1408);
}

TEST(PlanWorkload, AttentionKinds) {
  EXPECT_EQ(parse_attention("flash"), Attention::flash);
  EXPECT_EQ(parse_attention("materialized"), Attention::materialized);
  EXPECT_EQ(to_string(Attention::materialized), "materialized");
  try {
    parse_attention("sparse");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown attention 'sparse'"), std::string::npos) << e.what();
  }
}

TEST(PlanWorkload, CustomSizesAndOverrides) {
  ModelOverrides o;
  o.n_layer = 12;
  o.n_head = 12;
  o.n_embd = 768;
  EXPECT_EQ(make_workload("custom", o).params(), 124439808);
  ModelOverrides seq;
  seq.seq_len = 2048;
  const Workload w = make_workload("gpt2-124m", seq);
  EXPECT_EQ(w.seq_len, 2048);
  EXPECT_EQ(w.params(), 124439808 + 1024 * 768);  // a longer position table
}

TEST(PlanWorkload, ResNetCountsLayerByLayer) {
  // torchvision's published counts: ResNet-50 25,557,032 and ResNet-18 11,689,512
  // parameters; about 4.1 and 1.8 GMACs per 224×224 image.
  const CnnCounts r50 = resnet_counts(50);
  EXPECT_EQ(r50.params, 25557032);
  EXPECT_NEAR(r50.macs / 1e9, 4.09, 0.02);
  const CnnCounts r18 = resnet_counts(18);
  EXPECT_EQ(r18.params, 11689512);
  EXPECT_NEAR(r18.macs / 1e9, 1.82, 0.02);
  const Workload w = make_workload("resnet50");
  EXPECT_FALSE(w.is_transformer());
  EXPECT_EQ(w.params(), 25557032);
  EXPECT_GT(w.cnn.activation_elements, 1e7);
}

TEST(PlanWorkload, UnknownOrIncompleteModelsExplainThemselves) {
  try {
    make_workload("gpt5");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("unknown model 'gpt5'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("gpt2-1558m"), std::string::npos) << msg;
  }
  EXPECT_THROW(make_workload("custom"), Error);  // no shape given
  ModelOverrides bad;
  bad.n_head = 7;  // 768 is not divisible by 7
  EXPECT_THROW(make_workload("gpt2-124m", bad), Error);
  ModelOverrides cnn;
  cnn.n_layer = 4;
  EXPECT_THROW(make_workload("resnet50", cnn), Error);
  EXPECT_THROW(resnet_counts(42), Error);
}

}  // namespace
}  // namespace aiscale::plan
