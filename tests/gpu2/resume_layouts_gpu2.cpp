// Checkpoints of GPU layouts resumed in other layouts over NCCL, through the aiscale binary
// (the CPU matrix is tests/mpi/resume_layout_mpitest.cpp). Each pair of layouts has one
// global batch of 8 rows, so no tokens-per-step note is expected and the resumed runs
// follow the one that never stopped:
// - tp 2 (8 rows) and dp 2 (4 rows per rank), both ways;
// - dp 2 with ZeRO-3 (4 rows per rank) and tp 2 (8 rows), both ways;
// - pp 2 (8 rows in 2 micro-batches) and dp 2 (4 rows per rank), both ways; into dp 2 the
//   stored parallel.microbatches is reset with a note.
// Each: 20 steps straight in the first layout; 10 in the first resumed to 20 in the second;
// 10 in the second resumed to 20 in the first (gpu2_support.h: run_resumed_across, a
// constant learning rate after warm-up so that the 10-step runs follow the 20-step
// schedule). Tolerances those of the other GPU resume tests (compare_resumed_runs): bf16
// working copies and sums in another order agree to ~1e-3, a slice, stage or shard written
// to or read from the wrong place, or a data position off by a batch, jumps step 11's loss
// by far more than the 1e-2 allowed.
// Exit code 77 (skipped) with fewer than 2 GPUs or without NCCL.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "aiscale/train/checkpoint.h"
#include "../support/run_support.h"
#include "gpu2_support.h"

using namespace aiscale;
using namespace aiscale::testsupport;
using namespace aiscale::testsupport::gpu2;

namespace {

const std::string kLaunch = "launch -n 2 --threads-per-rank 4 -- train -q ";
const std::string kCommon = " parallel.communicator=nccl train.schedule=constant";

// Runs both directions between `first` and `second` and compares them with the straight
// run; `notes_a` must appear in the resume into `second`, `notes_b` in the one into `first`.
void expect_resumes_across(const std::string& name, const Layout& first, const Layout& second,
                           const std::string& note_a, const std::string& note_b) {
  const auto [dir, cfg] = gpu_run_dir("gpu2-resume-" + name, 20);
  ResumedRuns runs;
  ASSERT_NO_FATAL_FAILURE(run_resumed_across(dir, cfg, first, second, &runs));
  for (const RunOutput* r : {&runs.a20, &runs.b20}) {
    EXPECT_NE(r->output.find("resume note: the checkpoint was written by"), std::string::npos)
        << r->output;
    EXPECT_EQ(r->output.find("tokens per step change"), std::string::npos) << r->output;
    EXPECT_EQ(r->output.find("differ between the tensor-parallel ranks"), std::string::npos)
        << r->output;
  }
  EXPECT_NE(runs.a20.output.find(note_a), std::string::npos) << runs.a20.output;
  EXPECT_NE(runs.b20.output.find(note_b), std::string::npos) << runs.b20.output;
  // The data position: 20 steps of 8 samples, whatever the layouts.
  for (const char* run : {"straight", "a", "b"}) {
    const auto state = nlohmann::json::parse(
        read_bytes(dir / "runs" / run / "checkpoints" / train::checkpoint_name(20) / "state.json"));
    EXPECT_EQ(state["data_sample"], 160) << run;
  }
  ResumeComparison c;
  ASSERT_NO_FATAL_FAILURE(compare_resumed_runs(dir, name + " a", name + " b", &c));
  std::printf("[gpu2] resume %s: steps 11-20 loss relative difference max %.2e (first -> second) "
              "and %.2e (second -> first); final weights relative L2 %.2e and %.2e\n",
              name.c_str(), c.a.max_rel, c.b.max_rel, c.weights_a, c.weights_b);
}

TEST(ResumeLayouts, TensorParallelAndDataParallel) {
  const Layout tp2{kLaunch, kCommon + " parallel.tensor_parallel=2 train.batch_size=8",
                   " parallel.tensor_parallel=2 train.batch_size=8"};
  const Layout dp2{kLaunch, kCommon + " train.batch_size=4",
                   " parallel.tensor_parallel=1 train.batch_size=4"};
  expect_resumes_across("tp2-dp2", tp2, dp2, "dp 1 x tp 2 x pp 1, ZeRO-0, this run is dp 2 x tp 1",
                        "dp 2 x tp 1 x pp 1, ZeRO-0, this run is dp 1 x tp 2");
}

TEST(ResumeLayouts, ZeroThreeDataParallelAndTensorParallel) {
  const Layout zero3{kLaunch, kCommon + " parallel.zero_stage=3 train.batch_size=4",
                     " parallel.zero_stage=3 parallel.tensor_parallel=1 train.batch_size=4"};
  const Layout tp2{kLaunch, kCommon + " parallel.tensor_parallel=2 train.batch_size=8",
                   " parallel.zero_stage=0 parallel.tensor_parallel=2 train.batch_size=8"};
  expect_resumes_across("zero3-tp2", zero3, tp2, "ZeRO-3, this run is dp 1 x tp 2 x pp 1, ZeRO-0",
                        "ZeRO-0, this run is dp 2 x tp 1 x pp 1, ZeRO-3");
}

TEST(ResumeLayouts, PipelineAndDataParallel) {
  const Layout pp2{kLaunch,
                   kCommon + " parallel.pipeline_parallel=2 parallel.microbatches=2 train.batch_size=8",
                   " parallel.pipeline_parallel=2 parallel.microbatches=2 train.batch_size=8"};
  const Layout dp2{kLaunch, kCommon + " train.batch_size=4",
                   " parallel.pipeline_parallel=1 train.batch_size=4"};
  expect_resumes_across("pp2-dp2", pp2, dp2, "parallel.microbatches = 2 -> 1",
                        "this run is dp 1 x tp 1 x pp 2");
}

}  // namespace

int main(int argc, char** argv) { return run_multi_gpu_tests(argc, argv); }
