// ZeRO-3 on GPUs over NCCL, through the aiscale binary: parameters, gradients and
// optimiser state sharded over the ranks, each layer gathered before it computes and its
// gradients reduce-scattered after its backward.
// - 2 GPUs x B = 8 under ZeRO-3 train like 1 GPU x B = 16, also with gradient
//   accumulation (the micro-steps' reductions add up in the shards);
// - ZeRO-3 trains like plain data parallelism on the same GPUs, and the checkpoints hold
//   the whole optimizer state, gathered from the shards;
// - a run saved under ZeRO-3 resumes without it, and the other way round;
// - on 4 GPUs (where visible) the same against 1 GPU;
// - with the optimizer state on the host (parallel.offload_optimizer), on 2 GPUs and on one.
// Exit code 77 (skipped) with fewer than 2 GPUs or without NCCL.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

#include <cuda_runtime.h>

#include "aiscale/parallel/comm.h"
#include "aiscale/train/checkpoint.h"
#include "../support/run_support.h"
#include "gpu2_support.h"

using namespace aiscale;
using namespace aiscale::testsupport;
using namespace aiscale::testsupport::gpu2;

// Tolerances: those of the data-parallel tests (ddp_gpu2.cpp). ZeRO-3 sums the same
// gradients (reduce-scatter instead of all-reduce) and runs the same AdamW arithmetic on
// each rank's shard; the embeddings' gradient is reduced after the embedding backward
// instead of being gathered, which only changes the order of fp32 sums.
TEST(Zero3, MatchesOneGpuWithTwiceTheBatch) {
  expect_like_one_gpu("train.batch_size=8 parallel.zero_stage=3", "x8, ZeRO-3");
}

TEST(Zero3, GradientAccumulationAddsInTheShards) {
  expect_like_one_gpu("train.batch_size=4 train.grad_accum=2 parallel.zero_stage=3",
                      "x4 x 2 micro-steps, ZeRO-3");
}

TEST(Zero3, MatchesDdpAndCheckpointsHoldTheWholeState) {
  expect_zero_like_ddp(3, "");
}

// 10 steps under ZeRO-3 resumed to 20 without it, and 10 without resumed to 20 under
// ZeRO-3, against 20 straight ZeRO-3 steps: a shard written to or read from the wrong
// place would jump the loss at step 11.
TEST(Zero3, StateSurvivesCheckpoints) {
  expect_zero_state_survives_checkpoints(3, "");
}

// The optimizer offload: AdamW on the host over the same shards. On 2 GPUs it trains like
// 1 GPU with the whole batch; on one GPU (no collectives: the layers streamed through the
// ZeRO-3 buffers) it trains like the plain model. The host's AdamW is the CPU model's
// arithmetic, the GPU's its own kernel: the same formula, so the tolerances are those of
// the data-parallel tests.
TEST(Zero3, OffloadedOptimizerMatchesOneGpu) {
  expect_like_one_gpu("train.batch_size=8 parallel.zero_stage=3 parallel.offload_optimizer=true",
                      "x8, ZeRO-3, optimizer on the host");
}

TEST(Zero3, OneGpuWithTheOptimizerOnTheHost) {
  const auto [dir, cfg] = gpu_run_dir("gpu1-offload", 50);
  auto plain = run_aiscale("train -q -c " + cfg + " --set train.batch_size=16 run.name=plain");
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  auto off = run_aiscale("train -q -c " + cfg + " --set train.batch_size=16 run.name=off "
                         "parallel.zero_stage=3 parallel.offload_optimizer=true");
  ASSERT_EQ(off.exit_code, 0) << off.output;
  auto m1 = read_metrics(dir / "runs/plain"), m2 = read_metrics(dir / "runs/off");
  ASSERT_EQ(m1.size(), 50u);
  ASSERT_EQ(m2.size(), 50u);
  EXPECT_NEAR(double(m2[0]["grad_norm"]), double(m1[0]["grad_norm"]), 1e-3 * double(m1[0]["grad_norm"]));
  const LossComparison c = compare_losses(m1, m2, 1, 51, 1e-2, "one GPU, optimizer on the host");
  EXPECT_LT(c.mean_rel, 3e-3);
  EXPECT_LT(weight_distance(dir / "runs/plain", dir / "runs/off", 50), 5e-2);
  std::printf("[gpu2] one GPU x16, ZeRO-3 buffers with the optimizer on the host vs plain, 50 steps: "
              "loss relative difference max %.2e mean %.2e\n", c.max_rel, c.mean_rel);
}

// Impossible ZeRO-3 options are refused before any GPU memory is taken.
TEST(Zero3, RefusesGradientsInBf16) {
  const auto [dir, cfg] = gpu_run_dir("gpu2-zero3-bad", 10);
  expect_refused(run_aiscale("launch -n 2 --threads-per-rank 4 -- train -q -c " + cfg +
                             " --set parallel.communicator=nccl parallel.zero_stage=3 parallel.grad_comm=bf16"),
                 "parallel.grad_comm = \"fp32\"");
}

TEST(Zero3, FourRanksMatchOneGpu) {
  need_gpus(4);
  expect_like_one_gpu("train.batch_size=4 parallel.zero_stage=3", "x4, ZeRO-3", 4);
}

int main(int argc, char** argv) { return aiscale::testsupport::gpu2::run_multi_gpu_tests(argc, argv); }
