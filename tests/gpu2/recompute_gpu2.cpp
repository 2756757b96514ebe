// Full activation recomputation (train.recompute_layers) on GPUs over NCCL, through the
// aiscale binary: each layer's forward run again in its backward, with the layouts whose
// forward does more than compute:
// - tensor parallelism (tp = 2): the recomputed forward repeats its all-reduces;
// - ZeRO-3 on 2 GPUs: the recomputed forward reads the layer gathered for its backward;
// - pipeline stages (pp = 2, 1F1B): the stage's recomputation from its stash, then each
//   layer's again.
// Each run against the same layout without recomputation: the same arithmetic, so the same
// losses up to the attention backward's fp32 atomics (their order varies from run to run).
// Exit code 77 (skipped) with fewer than 2 GPUs or without NCCL.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include <cuda_runtime.h>

#include "aiscale/parallel/comm.h"

#include "../support/run_support.h"
#include "gpu2_support.h"

using namespace aiscale;
using namespace aiscale::testsupport;
using namespace aiscale::testsupport::gpu2;

namespace {

void expect_recompute_like_plain(const std::string& layout, const char* what) {
  const int steps = 20;
  const auto [dir, cfg] = gpu_run_dir("gpu2-recompute", steps);
  const std::string launch = "launch -n 2 --threads-per-rank 4 -- train -q -c " + cfg +
                             " --set parallel.communicator=nccl " + layout;
  auto plain = run_aiscale(launch + " run.name=plain");
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  auto full = run_aiscale(launch + " train.recompute_layers=true run.name=full");
  ASSERT_EQ(full.exit_code, 0) << full.output;
  auto m1 = read_metrics(dir / "runs/plain"), m2 = read_metrics(dir / "runs/full");
  ASSERT_EQ(m1.size(), size_t(steps));
  ASSERT_EQ(m2.size(), size_t(steps));
  EXPECT_EQ(double(m1[0]["loss"]), double(m2[0]["loss"])) << what << ": step 1";
  const LossComparison c = compare_losses(m1, m2, 1, size_t(steps) + 1, 1e-3, what);
  EXPECT_LT(c.mean_rel, 2e-4) << what;
  const double weight_rel = weight_distance(dir / "runs/plain", dir / "runs/full", steps);
  EXPECT_LT(weight_rel, 5e-3) << what;
  std::printf("[gpu2] %s, recomputing layers vs not, bf16, %d steps: step-1 loss %.6f vs %.6f; "
              "loss relative difference max %.2e mean %.2e; final weights relative L2 %.2e\n",
              what, steps, double(m1[0]["loss"]), double(m2[0]["loss"]), c.max_rel, c.mean_rel,
              weight_rel);
}

TEST(RecomputeLayers, TensorParallelMatchesWithout) {
  expect_recompute_like_plain("train.batch_size=16 parallel.tensor_parallel=2", "tp 2");
}

TEST(RecomputeLayers, ZeroThreeMatchesWithout) {
  expect_recompute_like_plain("train.batch_size=8 parallel.zero_stage=3", "ZeRO-3 on 2 GPUs");
}

TEST(RecomputeLayers, PipelineStagesMatchWithout) {
  expect_recompute_like_plain("train.batch_size=16 parallel.pipeline_parallel=2 "
                              "parallel.microbatches=4 parallel.pipeline_schedule=1f1b",
                              "pp 2 (1f1b)");
}

}  // namespace

int main(int argc, char** argv) { return run_multi_gpu_tests(argc, argv); }
