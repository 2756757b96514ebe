// The performance and memory models against aiscale's measured runs on 2× NVIDIA H200
// (docs/results/, 2026-11-26; fixtures copied from them in tests/plan/fixtures/).
// Calibration uses only the 1-GPU language result and the all-reduce bandwidth; the
// 2-GPU step is out of sample. Target: step time within ±15%.
#include <cmath>

#include <gtest/gtest.h>

#include "aiscale/plan/planner.h"

namespace aiscale::plan {
namespace {

const std::string kFixtures = std::string(AISCALE_SOURCE_DIR) + "/tests/plan/fixtures/";

// docs/results/multi-gpu.md, 2026-11-26 03:23 UTC, 2x H200, commit c7a7df5: GPT-2 124M,
// B = 16 per GPU, T = 1024, bf16: aiscale on 1 GPU 31.27 ms, on 2 GPUs (NCCL) 33.37 ms,
// efficiency 0.937. docs/results/one-gpu.md: aiscale's arena for that model and batch,
// 8.50 GiB.
constexpr double kMeasuredStep1 = 31.27e-3;
constexpr double kMeasuredStep2 = 33.37e-3;
constexpr double kMeasuredEfficiency2 = 0.937;
constexpr double kMeasuredArenaGiB = 8.50;

struct Host {
  Catalog cat = load_catalog(std::string(AISCALE_SOURCE_DIR) + "/data/systems",
                             {kFixtures + "gpuhost_2xh200.toml"});
};

// Plain data parallelism over `ranks` with `micro_batch` sequences each, as measured.
PlanRequest data_parallel(const Workload& w, Precision p, double tokens, long ranks, long micro_batch) {
  PlanRequest r;
  r.workload = w;
  r.tokens = tokens;
  r.precision = p;
  r.gpus = ranks;
  r.global_batch = micro_batch * ranks;
  r.pins.micro_batch = micro_batch;
  r.pins.zero = 0;
  return r;
}

// The one layout the pinned request leaves.
Candidate only_layout(const PlanRequest& r, const std::string& system, const Catalog& cat,
                      const Calibration& cal) {
  const PlanResult res = plan(r, cat.resolve(system), cat, cal, Assumptions{});
  EXPECT_EQ(res.ranked.size(), 1u);
  return res.ranked.at(0);
}

Candidate predict(const Host& h, long gpus, bool calibrated) {
  const Calibration cal =
      calibrated ? load_calibration({kFixtures + "h200x2_measured.jsonl"}, h.cat) : Calibration{};
  return only_layout(data_parallel(make_workload("gpt2-124m"), Precision::bf16, 1e9, gpus, 16),
                     "gpuhost", h.cat, cal);
}

double error(double predicted, double measured) { return predicted / measured - 1.0; }

TEST(PlanValidation, TwoH200CalibratedStepTimeWithinFifteenPercent) {
  const Host h;
  const Candidate one = predict(h, 1, true);
  const Candidate two = predict(h, 2, true);
  ASSERT_TRUE(one.figures.utilisation.measured);
  ASSERT_TRUE(two.figures.intra_bytes_per_s.measured);
  EXPECT_EQ(two.layout.dp, 2);
  EXPECT_EQ(two.layout.micro_batch, 16);
  EXPECT_EQ(two.layout.grad_accum, 1);
  // The pinned figure: predicted 2-GPU step against the measured 33.37 ms.
  EXPECT_LT(std::fabs(error(two.step.step_s, kMeasuredStep2)), 0.15)
      << "predicted " << two.step.step_s * 1e3 << " ms";
  // In sample: calibration takes the planner's AdamW estimate out of the measured step, so
  // the 1-GPU prediction gives the step back (it read 2.3% high while the update was
  // counted twice).
  EXPECT_LT(std::fabs(error(one.step.step_s, kMeasuredStep1)), 0.005)
      << "predicted " << one.step.step_s * 1e3 << " ms";
  // Efficiency: the model reduces fp32 gradients and hides none of it inside a node (as
  // measured, docs/design/gradient-exchange.md); it leaves out the ~0.4 ms embedding tail and the
  // synchronisation, so it may read a little high, but within 3 points of the measurement.
  const double eff = one.step.step_s / two.step.step_s;
  EXPECT_LE(eff, 1.0);
  EXPECT_NEAR(eff, kMeasuredEfficiency2, 0.03);
}

TEST(PlanValidation, TwoH200CopyEngineEfficiency) {
  // aiscale's copy-engine transport on 2 H200s measured efficiency 0.934-0.968 between
  // 06:40 and 10:09 UTC on 2026-11-26, 0.951-0.968 from 09:36 (commits c02277b-e5488fb;
  // docs/results/multi-gpu.md). The planner's
  // copy_engine_slowdown was read off these measurements, so this checks the arithmetic
  // around it (the tail, the optimizer, the calibrated compute), not an independent
  // prediction.
  const Host h;
  const Calibration cal = load_calibration({kFixtures + "h200x2_measured.jsonl"}, h.cat);
  PlanRequest r = data_parallel(make_workload("gpt2-124m"), Precision::bf16, 1e9, 2, 16);
  const Candidate automatic = only_layout(r, "gpuhost", h.cat, cal);  // as train's default
  EXPECT_EQ(automatic.layout.transport, GradTransport::copy_engine);
  r.grad_transport = GradTransport::nccl;
  const Candidate nccl = only_layout(r, "gpuhost", h.cat, cal);
  r.grad_transport = GradTransport::copy_engine;
  const Candidate ce = only_layout(r, "gpuhost", h.cat, cal);
  r.gpus = 1;
  r.global_batch = 16;
  const Candidate one = only_layout(r, "gpuhost", h.cat, cal);
  EXPECT_EQ(ce.layout.transport, GradTransport::copy_engine);
  EXPECT_LT(ce.step.step_s, nccl.step.step_s);
  EXPECT_NEAR(one.step.step_s / ce.step.step_s, 0.962, 0.01)
      << "predicted " << ce.step.step_s * 1e3 << " ms against " << one.step.step_s * 1e3;
}

TEST(PlanValidation, TwoH200CopyEngineStepFromOneCall) {
  // Calibrated with one run's own 1-GPU and 2-GPU copy-engine lines
  // (h200x2_copy_engine.jsonl, docs/results/multi-gpu.md, 2026-11-26 10:00 UTC, commit
  // e5488fb): both in sample, so the
  // model gives the measured 2-GPU step back (28.66 -> 29.74 ms).
  const Host h;
  const Calibration cal = load_calibration({kFixtures + "h200x2_copy_engine.jsonl"}, h.cat);
  PlanRequest r = data_parallel(make_workload("gpt2-124m"), Precision::bf16, 1e9, 2, 16);
  r.grad_transport = GradTransport::copy_engine;
  const Candidate two = only_layout(r, "gpuhost", h.cat, cal);
  ASSERT_TRUE(two.figures.copy_engine_slowdown.measured);
  EXPECT_LT(std::fabs(error(two.step.step_s, 0.0297370085)), 0.002)
      << "predicted " << two.step.step_s * 1e3 << " ms";
}

TEST(PlanValidation, TwoH200DatasheetStepTime) {
  // Without calibration the default utilisation (40%) is below the measured 46%: the
  // 2-GPU step is still within ±15%; the 1-GPU step is just outside (docs/guide/planner.md).
  const Host h;
  const Candidate two = predict(h, 2, false);
  EXPECT_FALSE(two.figures.utilisation.measured);
  EXPECT_LT(std::fabs(error(two.step.step_s, kMeasuredStep2)), 0.15)
      << "predicted " << two.step.step_s * 1e3 << " ms";
  EXPECT_GT(predict(h, 1, false).step.step_s, kMeasuredStep1);
}

TEST(PlanValidation, FlashAttentionMemoryAgainstTheMeasuredArena) {
  // With flash attention (the GPU default) the prediction for GPT-2 124M, B = 16, bf16 is
  // within 1.5× of aiscale's 8.50 GiB arena; counting the score matrices (materialized)
  // it was 2.8×.
  const Host h;
  const Candidate c = predict(h, 1, false);
  EXPECT_EQ(c.attention, Attention::flash);
  const double gib = c.memory.total / (1024.0 * 1024 * 1024);
  EXPECT_GT(gib, kMeasuredArenaGiB);  // the model keeps stated margins: it over-, not under-estimates
  EXPECT_LT(gib / kMeasuredArenaGiB, 1.5) << gib << " GiB";
  Workload w = make_workload("gpt2-124m");
  w.attention = Attention::materialized;
  const double materialized = memory_per_gpu(w, c.layout, Precision::bf16).total / (1024.0 * 1024 * 1024);
  EXPECT_GT(materialized / kMeasuredArenaGiB, 2.5) << materialized << " GiB";
}

// CPU ranks: the 2-core development VM (docs/results/cpu.md, commit 78a6f70), gpt-mini
// (L=4, H=4, C=256, V=50257, T=128), B = 8 per rank, fp32, measured 2026-11-26:
// 1 rank x 1 thread 1.642 s per step (61.1 GFLOP/s), 2 ranks x 1 thread 1.994 s
// (`aiscale launch -n 2 --threads-per-rank 1 -- bench language ... --threads 1`). The
// calibration file holds the 1-rank result and the 2-rank MPI all-reduce, not the 2-rank
// step (out of sample).
TEST(PlanValidation, CpuRanksCalibratedStepTime) {
  constexpr double kMeasuredCpu1 = 1.642, kMeasuredCpu2 = 1.994;
  const Catalog cat = load_catalog(std::string(AISCALE_SOURCE_DIR) + "/data/systems",
                                   {kFixtures + "devvm_cpu.toml"});
  const Calibration cal = load_calibration({kFixtures + "devvm_cpu_measured.jsonl"}, cat);
  ASSERT_EQ(cal.utilisation.size(), 1u);
  EXPECT_EQ(cal.utilisation[0].accelerator_id, "cpu:EPYC-VM-core");
  EXPECT_EQ(cal.utilisation[0].threads, 1);
  // 61.06 GFLOP/s of one core's 2.45 GHz x 32 = 78.4 GFLOP/s fp32 peak.
  EXPECT_NEAR(cal.utilisation[0].utilisation, 61.057 / 78.4, 1e-3);
  ModelOverrides mini;
  mini.n_layer = 4;
  mini.n_head = 4;
  mini.n_embd = 256;
  mini.seq_len = 128;
  mini.vocab_size = 50257;
  auto predict_cpu = [&](long ranks, bool calibrated) {
    return only_layout(data_parallel(make_workload("custom", mini), Precision::fp32, 1e7, ranks, 8),
                       "devvm/cpu", cat, calibrated ? cal : Calibration{});
  };
  const Candidate one = predict_cpu(1, true), two = predict_cpu(2, true);
  ASSERT_TRUE(one.figures.utilisation.measured);
  EXPECT_LT(std::fabs(error(one.step.step_s, kMeasuredCpu1)), 0.05);  // in sample
  // The 2-rank step waits for the slower rank: the 1-rank run's step spread (p90 1.879 s
  // against the 1.642 s median: σ = 11%) × E[max of 2 normals] = 0.56σ, 0.10 s; without it
  // the prediction read 11% low.
  ASSERT_TRUE(two.figures.step_spread.measured);
  EXPECT_NEAR(two.figures.step_spread.value, (1.879047179 - 1.6422514985) / (1.2816 * 1.6422514985), 1e-6);
  EXPECT_GT(two.step.straggler_s, 0.08);
  EXPECT_LT(std::fabs(error(two.step.step_s, kMeasuredCpu2)), 0.10)
      << "predicted " << two.step.step_s << " s";
  // Datasheet-only (52% of the peak, from the 2-thread run) is far off for one-thread ranks,
  // which reach 78%: what calibration is for (docs/guide/planner.md).
  EXPECT_GT(error(predict_cpu(1, false).step.step_s, kMeasuredCpu1), 0.3);
}

}  // namespace
}  // namespace aiscale::plan
