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
  auto dir = temp_dir("gpu2-zero3");
  write_byte_shards(dir, 400000, 8000);
  const std::string cfg = gpu_config(dir, 50);
  const std::string launch = "launch -n 2 --threads-per-rank 4 -- train -q -c " + cfg +
                             " --set train.batch_size=8 parallel.communicator=nccl ";
  auto ddp = run_aiscale(launch + "run.name=ddp");
  ASSERT_EQ(ddp.exit_code, 0) << ddp.output;
  auto zero = run_aiscale(launch + "run.name=zero parallel.zero_stage=3");
  ASSERT_EQ(zero.exit_code, 0) << zero.output;
  auto m1 = read_metrics(dir / "runs/ddp"), m2 = read_metrics(dir / "runs/zero");
  ASSERT_EQ(m1.size(), 50u);
  ASSERT_EQ(m2.size(), 50u);
  EXPECT_NEAR(double(m2[0]["grad_norm"]), double(m1[0]["grad_norm"]), 1e-3 * double(m1[0]["grad_norm"]));
  const LossComparison c = compare_losses(m1, m2, 1, 51, 1e-2, "ZeRO-3 vs DDP");
  EXPECT_LT(c.mean_rel, 3e-3);
  const double weight_rel = weight_distance(dir / "runs/ddp", dir / "runs/zero", 50);
  EXPECT_LT(weight_rel, 5e-2);
  auto s1 = train::read_checkpoint((dir / "runs/ddp/checkpoints" / train::checkpoint_name(50)).string(), true);
  auto s2 = train::read_checkpoint((dir / "runs/zero/checkpoints" / train::checkpoint_name(50)).string(), true);
  ASSERT_EQ(s1.m.size(), s2.m.size());
  const double m_rel = vector_distance(s1.m, s2.m), v_rel = vector_distance(s1.v, s2.v);
  EXPECT_LT(m_rel, 1e-1);
  EXPECT_LT(v_rel, 1e-1);
  std::printf("[gpu2] ZeRO-3 vs DDP, 2 GPUs x8, bf16, 50 steps: step-1 grad norm %.6f vs %.6f; loss "
              "relative difference max %.2e mean %.2e; final weights relative L2 %.2e; AdamW m %.2e, "
              "v %.2e\n", double(m1[0]["grad_norm"]), double(m2[0]["grad_norm"]), c.max_rel,
              c.mean_rel, weight_rel, m_rel, v_rel);
}

// 10 steps under ZeRO-3 resumed to 20 without it, and 10 without resumed to 20 under
// ZeRO-3, against 20 straight ZeRO-3 steps: a shard written to or read from the wrong
// place would jump the loss at step 11.
TEST(Zero3, StateSurvivesCheckpoints) {
  auto dir = temp_dir("gpu2-zero3-ckpt");
  write_byte_shards(dir, 400000, 8000);
  const std::string cfg = gpu_config(dir, 20);
  const std::string launch = "launch -n 2 --threads-per-rank 4 -- train -q ";
  const std::string common = " parallel.communicator=nccl train.schedule=constant";
  auto straight = run_aiscale(launch + "-c " + cfg + " --set run.name=straight parallel.zero_stage=3" + common);
  ASSERT_EQ(straight.exit_code, 0) << straight.output;
  auto a1 = run_aiscale(launch + "-c " + cfg + " --set run.name=a train.steps=10 parallel.zero_stage=3" + common);
  ASSERT_EQ(a1.exit_code, 0) << a1.output;
  auto a2 = run_aiscale(launch + "--resume " + (dir / "runs/a").string() +
                        " --set train.steps=20 parallel.zero_stage=0");
  ASSERT_EQ(a2.exit_code, 0) << a2.output;
  auto b1 = run_aiscale(launch + "-c " + cfg + " --set run.name=b train.steps=10 parallel.zero_stage=0" + common);
  ASSERT_EQ(b1.exit_code, 0) << b1.output;
  auto b2 = run_aiscale(launch + "--resume " + (dir / "runs/b").string() +
                        " --set train.steps=20 parallel.zero_stage=3");
  ASSERT_EQ(b2.exit_code, 0) << b2.output;
  auto ms = read_metrics(dir / "runs/straight"), ma = read_metrics(dir / "runs/a"),
       mb = read_metrics(dir / "runs/b");
  ASSERT_EQ(ms.size(), 20u);
  ASSERT_EQ(ma.size(), 20u);
  ASSERT_EQ(mb.size(), 20u);
  const LossComparison ca = compare_losses(ms, ma, 11, 21, 1e-2, "ZeRO-3 -> DDP resume");
  const LossComparison cb = compare_losses(ms, mb, 11, 21, 1e-2, "DDP -> ZeRO-3 resume");
  const double wa = weight_distance(dir / "runs/straight", dir / "runs/a", 20);
  const double wb = weight_distance(dir / "runs/straight", dir / "runs/b", 20);
  EXPECT_LT(wa, 5e-2);
  EXPECT_LT(wb, 5e-2);
  std::printf("[gpu2] checkpoints across ZeRO-3: steps 11-20 loss relative difference max %.2e "
              "(ZeRO-3 -> DDP) and %.2e (DDP -> ZeRO-3); final weights relative L2 %.2e and %.2e\n",
              ca.max_rel, cb.max_rel, wa, wb);
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
  auto dir = temp_dir("gpu1-offload");
  write_byte_shards(dir, 400000, 8000);
  const std::string cfg = gpu_config(dir, 50);
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
  auto dir = temp_dir("gpu2-zero3-bad");
  write_byte_shards(dir, 400000, 8000);
  const std::string cfg = gpu_config(dir, 10);
  auto r = run_aiscale("launch -n 2 --threads-per-rank 4 -- train -q -c " + cfg +
                       " --set parallel.communicator=nccl parallel.zero_stage=3 parallel.grad_comm=bf16");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("parallel.grad_comm = \"fp32\""), std::string::npos) << r.output;
}

TEST(Zero3, FourRanksMatchOneGpu) {
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess || gpus < 4) {
    std::printf("skipped: %d GPU(s) visible, this test needs 4\n", gpus);
    std::fflush(stdout);
    std::exit(77);
  }
  expect_like_one_gpu("train.batch_size=4 parallel.zero_stage=3", "x4, ZeRO-3", 4);
}

int main(int argc, char** argv) { return aiscale::testsupport::gpu2::run_multi_gpu_tests(argc, argv); }
