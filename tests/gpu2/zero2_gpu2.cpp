// ZeRO-2 on GPUs over NCCL, through the aiscale binary: gradients, fp32 master weights and
// AdamW moments sharded over the ranks (each layer's gradients reduce-scattered after its
// backward), the layers' working copy kept gathered from one update to the next
// (nn/models/gpt_zero3.cuh with gathered layers).
// - 2 GPUs x B = 8 under ZeRO-2 train like 1 GPU x B = 16, also with gradient
//   accumulation (the micro-steps' reductions add up in the shards);
// - ZeRO-2 trains like plain data parallelism on the same GPUs, and the checkpoints hold
//   the whole optimizer state, gathered from the shards;
// - a run saved under ZeRO-2 resumes without it, and the other way round;
// - the arena lies between ZeRO-3's and ZeRO-1's on the same model and GPUs;
// - on 4 GPUs (where visible) the same against 1 GPU.
// Exit code 77 (skipped) with fewer than 2 GPUs or without NCCL.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include <cuda_runtime.h>

#include "aiscale/parallel/comm.h"
#include "aiscale/train/checkpoint.h"
#include "../support/run_support.h"
#include "gpu2_support.h"

using namespace aiscale;
using namespace aiscale::testsupport;
using namespace aiscale::testsupport::gpu2;

// Tolerances: those of the data-parallel tests (ddp_gpu2.cpp): the same gradients summed
// by a reduce-scatter instead of an all-reduce, the same AdamW arithmetic on each rank's
// shard.
TEST(Zero2, MatchesOneGpuWithTwiceTheBatch) {
  expect_like_one_gpu("train.batch_size=8 parallel.zero_stage=2", "x8, ZeRO-2");
}

TEST(Zero2, GradientAccumulationAddsInTheShards) {
  expect_like_one_gpu("train.batch_size=4 train.grad_accum=2 parallel.zero_stage=2",
                      "x4 x 2 micro-steps, ZeRO-2");
}

TEST(Zero2, MatchesDdpAndCheckpointsHoldTheWholeState) {
  expect_zero_like_ddp(2, "");
}

// 10 steps under ZeRO-2 resumed to 20 without it, and the other way round, against 20
// straight ZeRO-2 steps.
TEST(Zero2, StateSurvivesCheckpoints) {
  expect_zero_state_survives_checkpoints(2, "");
}

// On a model whose layers outweigh its (byte) embeddings: ZeRO-2 keeps a quarter of the
// gradients' memory of ZeRO-1 less per parameter (shards instead of the whole fp32
// gradient), ZeRO-3 also the working copy's.
TEST(Zero2, ArenaBetweenZeroThreeAndZeroOne) {
  const fs::path dir = temp_dir("gpu2-zero2-memory");
  const std::string bench = "launch -n 2 --threads-per-rank 4 -- bench language --model gpt-tiny "
                            "--layers 16 --heads 4 --width 512 --vocab 256 --context 64 --batch 8 "
                            "--seq 64 --device cuda --precision bf16 --steps 3 --warmup 1 ";
  double arena[4] = {0, 0, 0, 0};
  for (int stage : {1, 2, 3}) {
    const fs::path out = dir / ("z" + std::to_string(stage) + ".jsonl");
    auto r = run_aiscale(bench + "--zero-stage " + std::to_string(stage) + " --output " + out.string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const std::string text = read_bytes(out);
    const nlohmann::json j = nlohmann::json::parse(text.substr(0, text.find('\n')));
    EXPECT_EQ(int(j["zero_stage"]), stage) << j.dump();
    arena[stage] = j["peak_memory_bytes"];
  }
  EXPECT_LT(arena[2], arena[1]);
  EXPECT_LT(arena[3], arena[2]);
  std::printf("[gpu2] arena on 2 GPUs: ZeRO-1 %.1f MiB, ZeRO-2 %.1f MiB, ZeRO-3 %.1f MiB\n",
              arena[1] / 1048576.0, arena[2] / 1048576.0, arena[3] / 1048576.0);
}

// Impossible ZeRO-2 options are refused before any GPU memory is taken.
TEST(Zero2, RefusesGradientsInBf16) {
  const auto [dir, cfg] = gpu_run_dir("gpu2-zero2-bad", 10);
  expect_refused(run_aiscale("launch -n 2 --threads-per-rank 4 -- train -q -c " + cfg +
                             " --set parallel.communicator=nccl parallel.zero_stage=2 parallel.grad_comm=bf16"),
                 "parallel.grad_comm = \"fp32\"");
}

TEST(Zero2, FourRanksMatchOneGpu) {
  need_gpus(4);
  expect_like_one_gpu("train.batch_size=4 parallel.zero_stage=2", "x4, ZeRO-2", 4);
}

int main(int argc, char** argv) { return aiscale::testsupport::gpu2::run_multi_gpu_tests(argc, argv); }
