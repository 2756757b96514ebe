// FP8 linear layers (train.precision = "fp8") in the layouts that bf16 runs on 2 GPUs,
// through the aiscale binary: each layout trains 50 steps in fp8 and in bf16 on the same
// GPUs, and the fp8 run must learn as the bf16 one does (its losses within a few percent,
// FP8's rounding, not within the bit-level tolerances of the layout tests), with its linear
// layers' GEMMs in FP8 (AISCALE_CUDA_VERBOSE=1 lists the plans cuBLASLt took).
// Exit code 77 (skipped) with fewer than 2 GPUs or without NCCL; a GPU without FP8 tensor
// cores is checked to refuse with its reason instead.
#include <gtest/gtest.h>

#include <cstdio>
#include <sstream>
#include <string>

#include <cuda_runtime.h>

#include "../support/run_support.h"
#include "gpu2_support.h"

using namespace aiscale;
using namespace aiscale::testsupport;
using namespace aiscale::testsupport::gpu2;

namespace {

bool fp8_tensor_cores() {
  cudaDeviceProp p{};
  return cudaGetDeviceProperties(&p, 0) == cudaSuccess && p.major * 10 + p.minor >= 89;
}

// `launch` (the command up to train's options) with `sets` in bf16 and in fp8; the fp8 run
// with the GEMM plans printed (after the first backward; pipeline stages print none).
void expect_fp8_like_bf16(const std::string& launch, const std::string& sets, const char* what,
                          bool plans = true) {
  const auto [dir, cfg] = gpu_run_dir("gpu2-fp8", 50);
  const std::string base = launch + cfg + " --set parallel.communicator=nccl " + sets + " ";
  auto bf16 = run_aiscale(base + "run.name=bf16");
  ASSERT_EQ(bf16.exit_code, 0) << bf16.output;
  auto fp8 = run_aiscale(base + "run.name=fp8 train.precision=fp8", "AISCALE_CUDA_VERBOSE=1");
  if (!fp8_tensor_cores()) {
    expect_refused(fp8, "use precision \"bf16\"");
    return;
  }
  ASSERT_EQ(fp8.exit_code, 0) << fp8.output;
  if (plans) {
    EXPECT_NE(fp8.output.find("fp8 e4m3xe4m3"), std::string::npos) << what << ": no FP8 forward GEMM";
    EXPECT_NE(fp8.output.find("fp8 e4m3xe5m2"), std::string::npos) << what << ": no FP8 gradient GEMM";
    std::istringstream lines(fp8.output);
    for (std::string line; std::getline(lines, line);)
      EXPECT_FALSE(line.find(" fp8 ") != std::string::npos && line.find("UNSUPPORTED") != std::string::npos)
          << what << ": an FP8 GEMM cuBLASLt refused: " << line;
  }
  auto m1 = read_metrics(dir / "runs/bf16"), m2 = read_metrics(dir / "runs/fp8");
  ASSERT_EQ(m1.size(), 50u);
  ASSERT_EQ(m2.size(), 50u);
  // Step 1 runs with the warm-up's scales: within FP8's rounding of bf16's loss.
  EXPECT_NEAR(double(m2[0]["loss"]), double(m1[0]["loss"]), 2e-2 * double(m1[0]["loss"])) << what;
  const LossComparison c = compare_losses(m1, m2, 1, 51, 0.08, what);
  EXPECT_LT(c.mean_rel, 0.03) << what;
  EXPECT_LT(double(m2.back()["loss"]), double(m2.front()["loss"]) - 0.5) << what << ": fp8 did not learn";
  std::printf("[gpu2] %s, fp8 vs bf16, 50 steps: final loss %.4f vs %.4f; loss relative "
              "difference max %.2e mean %.2e\n", what, double(m2.back()["loss"]),
              double(m1.back()["loss"]), c.max_rel, c.mean_rel);
}

const std::string kTwoRanks = "launch -n 2 --threads-per-rank 4 -- train -q -c ";

}  // namespace

TEST(Fp8Gpu2, DataParallel) { expect_fp8_like_bf16(kTwoRanks, "", "DDP"); }

TEST(Fp8Gpu2, ZeroOne) { expect_fp8_like_bf16(kTwoRanks, "parallel.zero_stage=1", "ZeRO-1"); }

TEST(Fp8Gpu2, ZeroThree) { expect_fp8_like_bf16(kTwoRanks, "parallel.zero_stage=3", "ZeRO-3"); }

TEST(Fp8Gpu2, TensorParallel) {
  expect_fp8_like_bf16(kTwoRanks, "parallel.tensor_parallel=2 train.batch_size=16", "tp 2");
}

TEST(Fp8Gpu2, SequenceParallel) {
  expect_fp8_like_bf16(kTwoRanks,
                       "parallel.tensor_parallel=2 parallel.sequence_parallel=true "
                       "train.batch_size=16",
                       "tp 2 with sequence parallelism");
}

TEST(Fp8Gpu2, PipelineStages) {
  expect_fp8_like_bf16(kTwoRanks,
                       "parallel.pipeline_parallel=2 parallel.microbatches=4 train.batch_size=16",
                       "pp 2, 4 micro-batches", false);
}

TEST(Fp8Gpu2, LayersRecomputed) {
  expect_fp8_like_bf16(kTwoRanks, "train.recompute_layers=true", "DDP, layers recomputed");
}

int main(int argc, char** argv) { return aiscale::testsupport::gpu2::run_multi_gpu_tests(argc, argv); }
