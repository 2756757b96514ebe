// Pipeline parallelism on GPUs over NCCL, through the aiscale binary: the layers split into
// stages (nn/models/gpt_cuda_pp.cuh), the batch into micro-batches, the activations and
// their gradients sent between the stages, each micro-batch's stage forward recomputed
// before its backward, each stage holding its layers with the embeddings and the final
// norm, their gradients summed over the data-parallel copies and (the embeddings' and the
// norm's) over the stages.
// - pp = 2 on 2 GPUs with the gpipe and with the 1f1b schedule trains like 1 GPU with the
//   same batch (the two stages read the same batches), and reports its bubble;
// - a pp = 2 checkpoint resumes on 1 GPU and the other way round (the checkpoints hold the
//   whole model);
// - on 4 GPUs (where visible) two data-parallel copies of a pp = 2 pipeline (dp 2 x pp 2),
//   also with ZeRO-1 over the copies, against 1 GPU, and tensor parallelism inside the
//   stages (tp 2 x pp 2, also with sequence parallelism) against 1 GPU;
// - a stage's arena holds its layers only (well under one GPU's for the whole model);
// - layouts that this version does not run on GPUs are refused before any GPU memory is
//   taken.
// Exit code 77 (skipped) with fewer than 2 GPUs or without NCCL; the 4-GPU test also with
// fewer than 4.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include <cuda_runtime.h>

#include "aiscale/parallel/comm.h"
#include "../support/run_support.h"
#include "gpu2_support.h"

using namespace aiscale;
using namespace aiscale::testsupport;
using namespace aiscale::testsupport::gpu2;

namespace {

// 1 GPU against dp copies of a pp-stage pipeline, both with a batch of 16 rows (16 / dp per
// copy, split into `micro` micro-batches), the schedule `schedule`, 20 steps. Tolerances:
// those of the tensor-parallel tests (tp_gpu2.cpp): a pipeline adds the micro-batches'
// gradients one after another in fp32 and its GEMMs see fewer rows (other algorithms,
// other roundings in bf16), so the runs agree to rounding, not bitwise.
void expect_pp_like_one_gpu(int dp, int pp, int micro, const std::string& schedule,
                            const char* what, int steps = 20, int tp = 1,
                            const std::string& extra = "") {
  const auto [dir, cfg] = gpu_run_dir("gpu2-pp", steps);
  auto one = run_aiscale("train -q -c " + cfg + " --set train.batch_size=16 run.name=one");
  ASSERT_EQ(one.exit_code, 0) << one.output;
  auto ppr = run_aiscale("launch -n " + std::to_string(dp * tp * pp) + " --threads-per-rank 4 -- train -q -c " +
                         cfg + " --set train.batch_size=" + std::to_string(16 / dp) +
                         " run.name=pp parallel.communicator=nccl parallel.pipeline_parallel=" +
                         std::to_string(pp) + " parallel.microbatches=" + std::to_string(micro) +
                         " parallel.pipeline_schedule=" + schedule +
                         " parallel.tensor_parallel=" + std::to_string(tp) + extra);
  ASSERT_EQ(ppr.exit_code, 0) << ppr.output;
  EXPECT_NE(ppr.output.find("dp " + std::to_string(dp) + " x tp " + std::to_string(tp) + " x pp " +
                            std::to_string(pp)),
            std::string::npos) << ppr.output;
  auto m1 = read_metrics(dir / "runs/one"), m2 = read_metrics(dir / "runs/pp");
  ASSERT_EQ(m1.size(), size_t(steps));
  ASSERT_EQ(m2.size(), size_t(steps));
  const double l1 = m1[0]["loss"], l2 = m2[0]["loss"], g1 = m1[0]["grad_norm"], g2 = m2[0]["grad_norm"];
  EXPECT_NEAR(l2, l1, 1e-3 * l1) << what;
  EXPECT_NEAR(g2, g1, 1e-3 * g1) << what;
  const LossComparison c = compare_losses(m1, m2, 1, size_t(steps) + 1, 1e-2, what);
  EXPECT_LT(c.mean_rel, 3e-3) << what;
  EXPECT_LT(double(m2.back()["loss"]), double(m2.front()["loss"]) - 0.5) << "pipelined training did not learn";
  // The bubble as rank 0 (the first stage) saw it: a fraction of the step.
  ASSERT_TRUE(m2.back().contains("pipeline_bubble")) << m2.back().dump();
  const double bubble = m2.back()["pipeline_bubble"];
  EXPECT_GE(bubble, 0.0);
  EXPECT_LT(bubble, 1.0);
  const double weight_rel = weight_distance(dir / "runs/one", dir / "runs/pp", steps);
  EXPECT_LT(weight_rel, 5e-2) << what;
  std::printf("[gpu2] 1 GPU vs %s, bf16, B=16, %d micro-batches, %d steps: step-1 loss %.6f vs "
              "%.6f, grad norm %.6f vs %.6f; loss relative difference max %.2e mean %.2e; final "
              "weights relative L2 difference %.2e; last step's bubble %.3f\n", what, micro, steps,
              l1, l2, g1, g2, c.max_rel, c.mean_rel, weight_rel, bubble);
}

}  // namespace

TEST(PipelineParallel, GpipeMatchesOneGpu) {
  expect_pp_like_one_gpu(1, 2, 4, "gpipe", "pp 2 (gpipe) on 2 GPUs");
}

TEST(PipelineParallel, OneFOneBMatchesOneGpu) {
  expect_pp_like_one_gpu(1, 2, 4, "1f1b", "pp 2 (1f1b) on 2 GPUs");
}

// More micro-batches than in flight and an uneven split: 3 layers over 2 stages (1 + 2),
// 4 micro-batches of 2 rows per micro-step under 1F1B, with gradient accumulation (the
// stages' sum only after the last micro-step).
TEST(PipelineParallel, UnevenStagesWithAccumulationMatchOneGpu) {
  const auto [dir, cfg] = gpu_run_dir("gpu2-pp-uneven", 20);
  const std::string common = " model.n_layer=3 train.grad_accum=2";
  auto one = run_aiscale("train -q -c " + cfg + " --set run.name=one" + common);
  ASSERT_EQ(one.exit_code, 0) << one.output;
  auto ppr = run_aiscale("launch -n 2 --threads-per-rank 4 -- train -q -c " + cfg +
                         " --set run.name=pp parallel.communicator=nccl parallel.pipeline_parallel=2 "
                         "parallel.microbatches=4 parallel.pipeline_schedule=1f1b" + common);
  ASSERT_EQ(ppr.exit_code, 0) << ppr.output;
  auto m1 = read_metrics(dir / "runs/one"), m2 = read_metrics(dir / "runs/pp");
  ASSERT_EQ(m1.size(), 20u);
  ASSERT_EQ(m2.size(), 20u);
  EXPECT_NEAR(double(m2[0]["loss"]), double(m1[0]["loss"]), 1e-3 * double(m1[0]["loss"]));
  EXPECT_NEAR(double(m2[0]["grad_norm"]), double(m1[0]["grad_norm"]), 1e-3 * double(m1[0]["grad_norm"]));
  const LossComparison c = compare_losses(m1, m2, 1, 21, 1e-2, "pp 2, 3 layers, accumulation");
  EXPECT_LT(c.mean_rel, 3e-3);
  std::printf("[gpu2] 1 GPU vs pp 2 (1f1b, 3 layers, 4 micro-batches, 2 micro-steps): loss "
              "relative difference max %.2e mean %.2e\n", c.max_rel, c.mean_rel);
}

// 10 steps at pp = 2 resumed on 1 GPU to 20, and 10 on 1 GPU resumed at pp = 2, against 20
// straight pp = 2 steps: a stage's part written to or read from the wrong place would jump
// the loss at step 11.
TEST(PipelineParallel, CheckpointsMoveToOneGpu) {
  const auto [dir, cfg] = gpu_run_dir("gpu2-pp-ckpt", 20);
  const std::string two = "launch -n 2 --threads-per-rank 4 -- train -q ";
  const std::string common = " train.schedule=constant";
  const std::string pp2 =
      " parallel.communicator=nccl parallel.pipeline_parallel=2 parallel.microbatches=2";
  ResumedRuns runs;
  ASSERT_NO_FATAL_FAILURE(run_resumed_across(
      dir, cfg, {two, common + pp2, pp2},
      {"train -q ", common,
       " parallel.pipeline_parallel=1 parallel.microbatches=1 parallel.communicator=auto"},
      &runs));
  ResumeComparison r;
  ASSERT_NO_FATAL_FAILURE(compare_resumed_runs(dir, "pp 2 -> 1 GPU resume", "1 GPU -> pp 2 resume", &r));
  std::printf("[gpu2] checkpoints across pipeline parallelism: steps 11-20 loss relative "
              "difference max %.2e (pp 2 -> 1 GPU) and %.2e (1 GPU -> pp 2); final weights "
              "relative L2 %.2e and %.2e\n", r.a.max_rel, r.b.max_rel, r.weights_a, r.weights_b);
}

// Layouts this version does not run on GPU pipelines: refused with the fix, before any GPU
// memory.
TEST(PipelineParallel, RefusesZeroAndOtherExchanges) {
  const auto [dir, cfg] = gpu_run_dir("gpu2-pp-bad", 10);
  const std::string launch = "launch -n 2 --threads-per-rank 4 -- train -q -c " + cfg +
                             " --set parallel.communicator=nccl parallel.pipeline_parallel=2 "
                             "parallel.microbatches=2 ";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"parallel.zero_stage=2", "parallel.zero_stage = 1"},
      {"parallel.zero_stage=3", "parallel.zero_stage"},
      {"parallel.grad_comm=bf16", "parallel.grad_comm = \"fp32\""},
      {"parallel.grad_transport=copy-engine", "parallel.grad_transport = \"nccl\""},
      {"model.n_layer=1", "model.n_layer"},
      {"parallel.microbatches=3", "parallel.microbatches"}};
  for (const auto& [keys, fix] : cases) expect_refused(run_aiscale(launch + keys), fix);
}

// Two data-parallel copies of a pp = 2 pipeline on 4 GPUs (one all-reduce over the four
// ranks sums the stages' parts and the copies) against 1 GPU with the whole batch.
TEST(PipelineParallel, DataParallelCopiesMatchOneGpu) {
  need_gpus(4);
  expect_pp_like_one_gpu(2, 2, 2, "1f1b", "dp 2 x pp 2 on 4 GPUs");
}

// ZeRO-1 over the data-parallel copies of a pp = 2 pipeline on 4 GPUs: the stages' sums of
// the embeddings and the final norm first, then a reduce-scatter over each stage's copies;
// AdamW on each data rank's part of the stage, the working copy all-gathered; the norm
// from the parts. Against 1 GPU (the final weights read from its checkpoint, gathered from
// the parts).
TEST(PipelineParallel, ZeroOneOverTheCopiesMatchesOneGpu) {
  need_gpus(4);
  expect_pp_like_one_gpu(2, 2, 2, "1f1b", "dp 2 x pp 2, ZeRO-1, on 4 GPUs", 20, 1,
                         " parallel.zero_stage=1");
}

// Tensor parallelism inside the stages on 4 GPUs: 2 tensor ranks x 2 stages against 1 GPU
// (each stage's tensor ranks split its layers; the activations pass between the stages'
// same tensor ranks).
TEST(PipelineParallel, TensorParallelStagesMatchOneGpu) {
  need_gpus(4);
  expect_pp_like_one_gpu(1, 2, 2, "1f1b", "tp 2 x pp 2 on 4 GPUs", 20, 2);
}

// The same with sequence parallelism inside the stages: each tensor rank passes its rows of
// the residual stream to the same tensor rank of the next stage (and their gradients back),
// the first stage's embedding backward gathers every rank's rows, and each stage sums its
// LayerNorms' gradients over its tensor ranks.
TEST(PipelineParallel, SequenceParallelStagesMatchOneGpu) {
  need_gpus(4);
  expect_pp_like_one_gpu(1, 2, 2, "1f1b", "tp 2 x pp 2, sequence parallelism, on 4 GPUs", 20, 2,
                         " parallel.sequence_parallel=true");
}

// A stage holds its layers' state and activations only: on a model whose layers outweigh
// its (byte) embeddings, two stages each take well under two thirds of one GPU's arena, and
// the benchmark's record names the layout and counts each token once per pipeline.
TEST(PipelineParallel, StagesHoldTheirLayersOnly) {
  const fs::path dir = temp_dir("gpu2-pp-memory");
  const std::string model = "bench language --model gpt-tiny --layers 16 --heads 4 --width 512 "
                            "--vocab 256 --context 64 --batch 8 --seq 64 --device cuda "
                            "--precision bf16 --steps 3 --warmup 1 --output ";
  auto one = run_aiscale(model + (dir / "one.jsonl").string());
  ASSERT_EQ(one.exit_code, 0) << one.output;
  auto two = run_aiscale("launch -n 2 --threads-per-rank 4 -- " + model + (dir / "pp.jsonl").string() +
                         " --pp 2 --microbatches 4 --pipeline-schedule 1f1b");
  ASSERT_EQ(two.exit_code, 0) << two.output;
  auto first = [](const fs::path& f) {
    const std::string text = read_bytes(f);
    return nlohmann::json::parse(text.substr(0, text.find('\n')));
  };
  const nlohmann::json a = first(dir / "one.jsonl"), b = first(dir / "pp.jsonl");
  EXPECT_EQ(int(b["pipeline_parallel"]), 2) << b.dump();
  EXPECT_EQ(b["pipeline_schedule"], "1f1b") << b.dump();
  const double m1 = a["peak_memory_bytes"], m2 = b["peak_memory_bytes"];
  EXPECT_LT(m2, 0.65 * m1) << "stage arena " << m2 << " bytes against one GPU's " << m1;
  const double per_device = b["tokens_per_s_per_device"];
  EXPECT_NEAR(per_device, 8 * 64 / 2 / double(b["step_time_median_s"]), 1e-6 * per_device);
  std::printf("[gpu2] arena: 1 GPU %.1f MiB, each of 2 stages %.1f MiB (%.2f); bubble %.3f\n",
              m1 / 1048576.0, m2 / 1048576.0, m2 / m1, double(b["pipeline_bubble_median"]));
}

int main(int argc, char** argv) { return run_multi_gpu_tests(argc, argv); }
