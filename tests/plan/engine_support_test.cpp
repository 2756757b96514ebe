// The planner's table of what `aiscale train` runs (plan/engine_support.cpp) against the
// train config's own validation: every device × precision × ZeRO stage × transport the
// table allows must be a config the trainer accepts, and every one it refuses must be
// refused. When the engine grows (tensor/pipeline parallelism, ZeRO-2/3, CNN training),
// this test fails until the table says so too.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "aiscale/core/error.h"
#include "aiscale/nn/models/gpt.h"
#include "aiscale/plan/engine_support.h"
#include "aiscale/plan/planner.h"
#include "aiscale/train/config.h"

namespace aiscale::plan {
namespace {

bool config_accepted(std::string_view device, Precision p, int zero, GradTransport t) {
  const std::string text = fmt::format(
      "[train]\ndevice = \"{}\"\nprecision = \"{}\"\n[parallel]\nzero_stage = {}\n"
      "grad_transport = \"{}\"\n",
      device, to_string(p), zero, t == GradTransport::copy_engine ? "copy-engine" : "nccl");
  try {
    train::parse_train_config(text, "engine_support_test", {});
    return true;
  } catch (const Error&) {
    return false;
  }
}

template <typename T>
bool has(const std::vector<T>& v, T x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

TEST(PlanEngineSupport, TableAgreesWithTheTrainConfigValidation) {
  for (const EngineSupport& e : engine_support())
    for (Precision p : {Precision::fp32, Precision::bf16, Precision::fp16})
      for (int zero = 0; zero <= 3; ++zero)
        for (GradTransport t : {GradTransport::nccl, GradTransport::copy_engine}) {
          const bool table = has(e.precisions, p) && has(e.zero_stages, zero) && has(e.transports, t) &&
                             (t != GradTransport::copy_engine || e.copy_engine_zero_stages.empty() ||
                              has(e.copy_engine_zero_stages, zero));
          EXPECT_EQ(table, config_accepted(e.device, p, zero, t))
              << "device " << e.device << ", " << to_string(p) << ", ZeRO-" << zero << ", "
              << to_string(t) << ": the table says " << (table ? "runs" : "does not run")
              << "; update kEngineSupport in src/aiscale/plan/engine_support.cpp";
        }
}

bool layout_accepted(std::string_view device, int tp, int pp, int zero = 0) {
  const std::string text = fmt::format(
      "[model]\npreset = \"gpt-tiny\"\n[train]\ndevice = \"{}\"\nseq_len = 32\n"
      "[parallel]\ntensor_parallel = {}\npipeline_parallel = {}\nmicrobatches = {}\n"
      "zero_stage = {}\n",
      device, tp, pp, pp, zero);
  try {
    train::parse_train_config(text, "engine_support_test", {});
    return true;
  } catch (const Error&) {
    return false;
  }
}

TEST(PlanEngineSupport, TensorAndPipelineSizesAgreeWithTheTrainConfig) {
  // A row that allows only size 1 must be a device whose config refuses size 2, and a row
  // that allows more must be one whose config accepts it.
  for (const EngineSupport& e : engine_support()) {
    EXPECT_EQ(e.max_tensor > 1, layout_accepted(e.device, 2, 1))
        << "device " << e.device << ": tensor_parallel = 2; update kEngineSupport";
    EXPECT_EQ(e.max_pipeline > 1, layout_accepted(e.device, 1, 2))
        << "device " << e.device << ": pipeline_parallel = 2; update kEngineSupport";
  }
  // The ZeRO stages a tensor-parallel layout runs with (GPU ranks: 0 to 3).
  for (const EngineSupport& e : engine_support())
    if (e.max_tensor > 1)
      for (int zero = 0; zero <= 3; ++zero) {
        const bool table = has(e.zero_stages, zero) &&
                           (e.tensor_zero_stages.empty() || has(e.tensor_zero_stages, zero));
        EXPECT_EQ(table, layout_accepted(e.device, 2, 1, zero))
            << "device " << e.device << ": tensor_parallel = 2 with ZeRO-" << zero
            << "; update kEngineSupport";
      }
  // The ZeRO stages a pipeline runs with (GPU ranks: 0; CPU ranks: not ZeRO-3).
  for (const EngineSupport& e : engine_support())
    if (e.max_pipeline > 1)
      for (int zero = 0; zero <= 3; ++zero) {
        const bool table = has(e.zero_stages, zero) &&
                           (e.pipeline_zero_stages.empty() ? zero != 3
                                                           : has(e.pipeline_zero_stages, zero));
        EXPECT_EQ(table, layout_accepted(e.device, 1, 2, zero))
            << "device " << e.device << ": pipeline_parallel = 2 with ZeRO-" << zero
            << "; update kEngineSupport";
      }
  // Tensor parallelism beside pipeline stages.
  for (const EngineSupport& e : engine_support())
    if (e.max_tensor > 1 && e.max_pipeline > 1) {
      EXPECT_EQ(e.pipeline_with_tensor && !e.tensor_no_pipeline, layout_accepted(e.device, 2, 2))
          << "device " << e.device << ": tp 2 x pp 2; update kEngineSupport";
    }
  const std::string keys = train::config_reference();
  for (const EngineSupport& e : engine_support())
    if (!has(e.models, WorkloadKind::cnn)) {
      EXPECT_EQ(keys.find("resnet"), std::string::npos) << "CNN training exists: update the table";
    }
}

TEST(PlanEngineSupport, GapsNameWhatIsMissing) {
  const Workload gpt = make_workload("gpt2-350m");
  Layout l;
  EXPECT_EQ(engine_gap(gpt, l, Precision::bf16, false), "");
  l.dp = 8;
  l.zero = 1;
  EXPECT_EQ(engine_gap(gpt, l, Precision::bf16, false), "");
  EXPECT_EQ(engine_gap(gpt, l, Precision::fp32, true), "");  // CPU ZeRO-1 wraps plain dp
  l.tp = 2;  // but not tensor parallelism
  EXPECT_NE(engine_gap(gpt, l, Precision::fp32, true).find("ZeRO-1"), std::string::npos);
  l.tp = 1;
  l.zero = 2;  // GPU ZeRO-2 and ZeRO-3 run over NCCL, not over the copy engines
  EXPECT_EQ(engine_gap(gpt, l, Precision::bf16, false), "");
  l.transport = GradTransport::copy_engine;
  EXPECT_NE(engine_gap(gpt, l, Precision::bf16, false).find("copy engines"), std::string::npos);
  l.transport = GradTransport::nccl;
  l.zero = 3;
  EXPECT_EQ(engine_gap(gpt, l, Precision::bf16, false), "");
  l.transport = GradTransport::copy_engine;
  EXPECT_NE(engine_gap(gpt, l, Precision::bf16, false).find("copy engines"), std::string::npos);
  l.transport = GradTransport::nccl;
  l.zero = 0;
  l.tp = 2;  // GPU tensor parallelism with data-parallel copies (here 8), ZeRO 0 to 3
  for (int zero = 0; zero <= 3; ++zero) {
    l.zero = zero;
    EXPECT_EQ(engine_gap(gpt, l, Precision::bf16, false), "") << "ZeRO-" << zero;
  }
  l.zero = 2;  // ZeRO-2/3 beside tensor parallelism: over NCCL, not the copy engines
  l.transport = GradTransport::copy_engine;
  EXPECT_NE(engine_gap(gpt, l, Precision::bf16, false).find("copy engines"), std::string::npos);
  l.transport = GradTransport::nccl;
  l.pp = 2;  // but not inside pipeline stages
  EXPECT_NE(engine_gap(gpt, l, Precision::bf16, false).find("pipeline stages run with ZeRO 0 and 1 only"),
            std::string::npos) << engine_gap(gpt, l, Precision::bf16, false);
  l.pp = 1;
  l.dp = 1026;  // one bucket per data group under tensor parallelism: no n_embd + 1 bound
  l.zero = 1;
  EXPECT_EQ(engine_gap(gpt, l, Precision::bf16, false), "");
  l.dp = 8;
  l.pp = 2;  // dp x tp x pp with ZeRO-1 over each stage's data group
  EXPECT_EQ(engine_gap(gpt, l, Precision::bf16, false), "");
  l.pp = 1;
  l.zero = 0;
  l.dp = 1;
  EXPECT_EQ(engine_gap(gpt, l, Precision::bf16, false), "");
  l.dp = 8;
  l.tp = 1;
  l.pp = 2;  // GPU pipeline stages with data-parallel copies (dp x pp), ZeRO 0 or 1 over NCCL
  EXPECT_EQ(engine_gap(gpt, l, Precision::bf16, false), "");
  l.zero = 1;
  EXPECT_EQ(engine_gap(gpt, l, Precision::bf16, false), "");
  l.zero = 2;
  EXPECT_NE(engine_gap(gpt, l, Precision::bf16, false).find("pipeline stages run with ZeRO 0 and 1 only"),
            std::string::npos) << engine_gap(gpt, l, Precision::bf16, false);
  l.zero = 0;
  l.transport = GradTransport::copy_engine;
  EXPECT_NE(engine_gap(gpt, l, Precision::bf16, false).find("pipeline"), std::string::npos);
  l.transport = GradTransport::nccl;
  l.pp = 1;
  // FP8 linear layers for the transformers on GPU ranks; not for ResNets, not on CPUs.
  EXPECT_EQ(engine_gap(gpt, l, Precision::fp8, false), "");
  EXPECT_NE(engine_gap(make_workload("resnet50"), Layout{}, Precision::fp8, false).find("fp8"),
            std::string::npos);
  EXPECT_NE(engine_gap(gpt, l, Precision::fp8, true).find("fp8"), std::string::npos);
  EXPECT_NE(engine_gap(gpt, l, Precision::bf16, true).find("bf16"), std::string::npos);
  EXPECT_EQ(engine_gap(make_workload("resnet50"), Layout{}, Precision::bf16, false), "");
  l.dp = 1026;  // ZeRO-1 shards inside a residual bias: at most n_embd + 1 ranks
  l.zero = 1;
  EXPECT_NE(engine_gap(gpt, l, Precision::bf16, false).find("n_embd + 1"), std::string::npos);
}

const Catalog& catalog() {
  static const Catalog cat = load_catalog(std::string(AISCALE_SOURCE_DIR) + "/data/systems");
  return cat;
}

TEST(PlanEngineSupport, DefaultPlansRankOnlyRunnableLayouts) {
  PlanRequest r;
  r.workload = make_workload("gpt2-350m");
  r.tokens = 10e9;
  const PlanResult res = plan(r, catalog().gpu_targets(), catalog(), Calibration{}, Assumptions{});
  ASSERT_FALSE(res.ranked.empty());
  for (const auto& c : res.ranked) {
    EXPECT_TRUE(c.runs()) << c.target.label() << ": " << c.engine_gap;
    EXPECT_EQ(c.layout.pp, 1);
    EXPECT_NE(c.layout.zero, 2);
  }
  // ResNet-50 trains on GPUs with plain data parallelism: only such rows are ranked.
  PlanRequest cnn;
  cnn.workload = make_workload("resnet50");
  cnn.images = kImageNetTrainImages;
  cnn.epochs = 90;
  const PlanResult runs = plan(cnn, catalog().gpu_targets(), catalog(), Calibration{}, Assumptions{});
  ASSERT_FALSE(runs.ranked.empty());
  for (const auto& c : runs.ranked) {
    EXPECT_TRUE(c.runs()) << c.target.label() << ": " << c.engine_gap;
    EXPECT_EQ(c.layout.tp, 1);
    EXPECT_EQ(c.layout.pp, 1);
    EXPECT_EQ(c.layout.zero, 0);
  }
  // GPT-3 175B: ZeRO-3 with full recomputation fits the GPUs, but not the nodes' host
  // memory, where every rank keeps whole vectors of the model; tensor and pipeline
  // parallelism together would fit: a marked row beside none runnable.
  PlanRequest big;
  big.workload = make_workload("gpt3-175b");
  big.tokens = 300e9;
  big.include_unsupported = true;
  const PlanResult both = plan(big, catalog().resolve("leonardo"), catalog(), Calibration{}, Assumptions{});
  ASSERT_EQ(both.ranked.size(), 1u);
  EXPECT_FALSE(both.ranked[0].runs());
  ASSERT_EQ(both.rejected.size(), 1u);  // the runnable search found nothing that fits
  EXPECT_NE(both.rejected[0].reason.find("host memory"), std::string::npos) << both.rejected[0].reason;
}

}  // namespace
// The host memory a node's ranks need at a checkpoint (every rank holds the whole model's
// parameters and AdamW moments there): GPT-2 6.6B on 4 GPUs of a 512 GiB node fits (295
// GiB), GPT-3 175B does not (7.6 TiB); an unknown node memory refuses nothing.
TEST(PlanEngineSupport, HostMemoryBoundsTheModelPerNode) {
  Layout four;
  four.dp = 4;
  EXPECT_EQ(host_memory_gap(make_workload("gpt2-6.6b"), four, 4, 512), "");
  Layout many;
  many.dp = 256;
  many.zero = 3;
  const std::string gap = host_memory_gap(make_workload("gpt3-175b"), many, 4, 512);
  EXPECT_NE(gap.find("host memory"), std::string::npos) << gap;
  EXPECT_NE(gap.find("512 GiB"), std::string::npos) << gap;
  EXPECT_EQ(host_memory_gap(make_workload("gpt3-175b"), many, 4, 0), "");
  // One rank on a node needs a quarter of what four do.
  Layout one;
  EXPECT_EQ(host_memory_gap(make_workload("gpt2-6.6b"), one, 4, 80), "");
  EXPECT_NE(host_memory_gap(make_workload("gpt2-6.6b"), four, 4, 80), "");
}

// The families the table lets `aiscale train` build against the engine's own model factory:
// when the Llama family's model lands on a device, this fails until the table says so (and
// the planner then prices Llama layouts the engine's way).
TEST(PlanEngineSupport, ModelFamiliesAgreeWithTheModelFactory) {
  for (const EngineSupport& e : engine_support()) {
    if (e.device == "cuda" && !nn::cuda_available()) continue;
    for (nn::GptFamily f : {nn::GptFamily::gpt2, nn::GptFamily::llama}) {
      const nn::GptConfig c = nn::gpt_preset(f == nn::GptFamily::llama ? "llama-tiny" : "gpt-tiny");
      nn::GptRunOptions o;
      o.batch = 1;
      o.seq = 8;
      bool built = true;
      try {
        nn::make_gpt(std::string(e.device), c, o);
      } catch (const Error&) {
        built = false;
      }
      const bool table =
          std::find(e.gpt_families.begin(), e.gpt_families.end(), f) != e.gpt_families.end();
      EXPECT_EQ(table, built) << "device " << e.device << ", family " << nn::to_string(f)
                              << ": update gpt_families in src/aiscale/plan/engine_support.cpp";
    }
  }
}

}  // namespace aiscale::plan
