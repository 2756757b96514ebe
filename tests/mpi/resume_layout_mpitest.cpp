// Checkpoints resumed in other layouts on CPU ranks over MPI (through `aiscale launch`):
// 8 steps of a tiny model, a checkpoint at step 4, in six layouts of one global batch of
// 8 rows (1 rank x 8; dp 2 x 4; tp 2 x 8; pp 2 x 8 in 2 micro-batches; ZeRO-1, ZeRO-2 and
// ZeRO-3 over dp 2 x 4). Each layout's checkpoint holds the whole tensors (the same as one rank's);
// resumed in its own layout at step 4 it continues to the bit; resumed in another layout it
// continues like the run that never stopped, with the notes of what changed.
//
// Tolerance across layouts: the layouts sum the same fp32 values in another order (half
// sums of a row-parallel matmul, reduce-scatters, the mean over ranks of means over rows),
// ~1e-7 relative per value; over 8 AdamW steps the losses stay within 1e-5 relative of the
// one-rank run (measured: at most 1e-7), the norms too. A slice or shard written
// to or read from the wrong place, or a data position off by one batch, moves step 5's loss
// by more than 1e-3. The same layout resumed must give the same bits.
//
// ZeRO-1 on CPU ranks wraps plain data parallelism (data_parallel_wrappers_mpitest.cpp).
// tests/gpu2/resume_layouts_gpu2.cpp resumes GPU layouts.
#include <gtest/gtest.h>

#include <cmath>

#include "aiscale/train/checkpoint.h"
#include "../support/run_support.h"

using namespace aiscale;
using namespace aiscale::testsupport;

namespace {

struct Layout {
  const char* name;
  int ranks;
  const char* keys;  // --set keys beside train.batch_size
  int batch;         // rows per data-parallel rank (8 in all)
};
const Layout kLayouts[] = {
    {"one", 1, "", 8},
    {"dp2", 2, "", 4},
    {"tp2", 2, "parallel.tensor_parallel=2", 8},
    {"pp2", 2, "parallel.pipeline_parallel=2 parallel.microbatches=2", 8},
    {"zero1", 2, "parallel.zero_stage=1", 4},
    {"zero2", 2, "parallel.zero_stage=2", 4},
    {"zero3", 2, "parallel.zero_stage=3", 4},
};

std::string launch(int ranks) {
  return ranks == 1 ? "" : "launch -n " + std::to_string(ranks) + " --threads-per-rank 1 -- ";
}

class ResumeLayout : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = temp_dir("resume-layout");
    write_byte_shards(dir_);
    config_ = tiny_config(dir_);
    for (const Layout& l : kLayouts) {
      auto r = run_aiscale(launch(l.ranks) + "train -q -c " + config_ +
                           " --set train.steps=8 train.warmup_steps=2 train.eval_batches=1 "
                           "run.checkpoint_every=4 run.keep_checkpoints=5 train.batch_size=" +
                           std::to_string(l.batch) + " " + l.keys + " run.name=" + l.name);
      ASSERT_EQ(r.exit_code, 0) << l.name << ": " << r.output;
    }
  }
  // A copy of base run `from` resumed at step 4 on `ranks` ranks with `sets`, as run `name`.
  static RunOutput resume(const std::string& from, const std::string& name, int ranks,
                          const std::string& sets) {
    const fs::path to = dir_ / "runs" / name;
    fs::remove_all(to);
    fs::copy(dir_ / "runs" / from, to, fs::copy_options::recursive);
    return run_aiscale(launch(ranks) + "train -q --resume " + to.string() + " --checkpoint 4" +
                       (sets.empty() ? "" : " --set " + sets));
  }
  // Steps 1-8 of `run` against `reference`: within the tolerances above, or (exact) bitwise.
  static void expect_like(const std::string& reference, const std::string& run, bool exact) {
    auto a = read_metrics(dir_ / "runs" / reference), b = read_metrics(dir_ / "runs" / run);
    ASSERT_EQ(a.size(), 8u) << reference;
    ASSERT_EQ(b.size(), 8u) << run;
    for (size_t i = 0; i < a.size(); ++i) {
      const double x = a[i]["loss"], y = b[i]["loss"], gx = a[i]["grad_norm"], gy = b[i]["grad_norm"];
      if (exact) {
        EXPECT_EQ(x, y) << run << " step " << i + 1;
        EXPECT_EQ(gx, gy) << run << " step " << i + 1;
      } else {
        EXPECT_NEAR(x, y, 1e-5 * std::abs(x)) << run << " step " << i + 1;
        EXPECT_NEAR(gx, gy, 1e-5 * gx) << run << " step " << i + 1;
      }
    }
  }
  static train::CheckpointState checkpoint(const std::string& run, int step) {
    return train::read_checkpoint(
        (dir_ / "runs" / run / "checkpoints" / train::checkpoint_name(step)).string(), true);
  }
  static nlohmann::json state(const std::string& run, int step) {
    return nlohmann::json::parse(read_bytes(dir_ / "runs" / run / "checkpoints" /
                                            train::checkpoint_name(step) / "state.json"));
  }
  static fs::path dir_;
  static std::string config_;
};
fs::path ResumeLayout::dir_;
std::string ResumeLayout::config_;

// Tensor slices, pipeline stages and ZeRO shards are gathered into whole tensors: every
// layout's checkpoint holds the one-rank run's weights and AdamW moments (a shard or slice
// left out would leave zeros: a distance near 1), and the same data position.
TEST_F(ResumeLayout, EveryLayoutWritesTheWholeTensors) {
  const train::CheckpointState one = checkpoint("one", 4);
  for (const Layout& l : kLayouts) {
    const train::CheckpointState s = checkpoint(l.name, 4);
    ASSERT_EQ(s.params.size(), one.params.size()) << l.name;
    EXPECT_LT(vector_distance(one.params, s.params), 1e-5) << l.name;
    EXPECT_LT(vector_distance(one.m, s.m), 1e-4) << l.name;
    EXPECT_LT(vector_distance(one.v, s.v), 1e-4) << l.name;
    EXPECT_EQ(s.data, (train::DataPosition{0, 32})) << l.name;
    EXPECT_EQ(train::tokens_per_step(s), 8 * 32) << l.name;
  }
  const nlohmann::json z = state("zero3", 4);
  EXPECT_EQ(z["world_size"], 2);
  EXPECT_EQ(z["zero_stage"], 3);
  EXPECT_EQ(state("pp2", 4)["pipeline_parallel"], 2);
}

// The same layout resumed: set_params / set_optimizer_state put every slice and shard back
// where it was, so the run continues to the bit.
TEST_F(ResumeLayout, SameLayoutResumesBitIdentical) {
  for (const Layout& l : kLayouts) {
    if (l.ranks == 1) continue;  // one rank: tests/train/checkpoint_test.cpp
    const std::string name = std::string(l.name) + "-again";
    auto r = resume(l.name, name, l.ranks, "");
    ASSERT_EQ(r.exit_code, 0) << name << ": " << r.output;
    EXPECT_EQ(r.output.find("resume note"), std::string::npos) << r.output;
    expect_like(l.name, name, /*exact=*/true);
  }
}

TEST_F(ResumeLayout, OneRankToDataParallelAndBack) {
  auto r = resume("one", "one-to-dp2", 2, "train.batch_size=4");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("written by dp 1 x tp 1 x pp 1, ZeRO-0, this run is dp 2 x tp 1 x pp 1"),
            std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("tokens per step change"), std::string::npos) << r.output;
  expect_like("one", "one-to-dp2", false);
  r = resume("dp2", "dp2-to-one", 1, "train.batch_size=8");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_like("one", "dp2-to-one", false);
}

TEST_F(ResumeLayout, DataParallelToTensorParallelAndBack) {
  auto r = resume("dp2", "dp2-to-tp2", 2, "parallel.tensor_parallel=2 train.batch_size=8");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_like("one", "dp2-to-tp2", false);
  r = resume("tp2", "tp2-to-dp2", 2, "parallel.tensor_parallel=1 train.batch_size=4");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_like("one", "tp2-to-dp2", false);
}

// Pipeline stages onto one rank: parallel.microbatches of the stored config is reset, with
// a note naming the key, both values and why.
TEST_F(ResumeLayout, PipelineToOneRankResetsTheMicrobatches) {
  auto r = resume("pp2", "pp2-to-one", 1, "parallel.pipeline_parallel=1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("resume note: parallel.microbatches = 2 -> 1: micro-batches split the "
                          "batch over pipeline stages"), std::string::npos) << r.output;
  expect_like("one", "pp2-to-one", false);
  // The resumed run's config holds the new value.
  EXPECT_NE(read_bytes(dir_ / "runs/pp2-to-one/config.toml").find("microbatches = 1"),
            std::string::npos);
}

// Sharded optimizer state into other shards and into one whole copy.
TEST_F(ResumeLayout, ZeroStagesReshardAndGather) {
  auto r = resume("zero2", "zero2-to-zero3", 2, "parallel.zero_stage=3");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("ZeRO-2, this run is dp 2 x tp 1 x pp 1, ZeRO-3"), std::string::npos) << r.output;
  expect_like("one", "zero2-to-zero3", false);
  r = resume("zero3", "zero3-to-one", 1, "parallel.zero_stage=0 train.batch_size=8");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_like("one", "zero3-to-one", false);
  // ZeRO-1's shards (optimizer state only) into ZeRO-3's (weights too), and back.
  r = resume("zero1", "zero1-to-zero3", 2, "parallel.zero_stage=3");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("ZeRO-1, this run is dp 2 x tp 1 x pp 1, ZeRO-3"), std::string::npos) << r.output;
  expect_like("one", "zero1-to-zero3", false);
  r = resume("zero3", "zero3-to-zero1", 2, "parallel.zero_stage=1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_like("one", "zero3-to-zero1", false);
}

// Another global batch (2 ranks x 4 onto 1 rank x 4): said in a note, and the data goes on
// from the checkpoint's sample in the same order, 4 samples a step.
TEST_F(ResumeLayout, AnotherGlobalBatchIsSaid) {
  auto r = resume("dp2", "dp2-to-one-half", 1, "");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("resume note: tokens per step change from 256 (dp 2 x batch_size 4 x "
                          "grad_accum 1 x seq_len 32) to 128 (dp 1 x batch_size 4 x grad_accum 1 x "
                          "seq_len 32): the data continues from sample 32 of epoch 0"),
            std::string::npos) << r.output;
  EXPECT_EQ(state("dp2-to-one-half", 8)["data_sample"], 32 + 4 * 4);
  // Its first step reads the first half of the straight run's step 5 batch: the loss of
  // one half, near the whole batch's but not equal to it.
  const double whole = read_metrics(dir_ / "runs/dp2")[4]["loss"];
  const double half = read_metrics(dir_ / "runs/dp2-to-one-half")[4]["loss"];
  EXPECT_NE(whole, half);
  EXPECT_NEAR(whole, half, 0.1 * whole);
}

// Four ranks: two data-parallel copies of a tensor group, from two plain copies.
TEST_F(ResumeLayout, DataParallelToDataTimesTensorOnFourRanks) {
  auto r = resume("dp2", "dp2-to-dp2tp2", 4, "parallel.tensor_parallel=2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("this run is dp 2 x tp 2 x pp 1"), std::string::npos) << r.output;
  expect_like("one", "dp2-to-dp2tp2", false);
}

}  // namespace
