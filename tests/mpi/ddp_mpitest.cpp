// Data parallelism over MPI ranks, through `aiscale launch` (mpirun).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>

#include "aiscale/train/checkpoint.h"
#include "aiscale/train/safetensors.h"
#include "../support/run_support.h"

using namespace aiscale;
using namespace aiscale::testsupport;

namespace {

class Ddp : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = temp_dir("ddp");
    write_byte_shards(dir_);
    config_ = tiny_config(dir_);
  }
  static fs::path dir_;
  static std::string config_;
};
fs::path Ddp::dir_;
std::string Ddp::config_;

std::map<std::string, train::SafeTensor> weights(const fs::path& run, int step) {
  fs::path p = run / "checkpoints" / train::checkpoint_name(step) / "model.safetensors";
  return train::safetensors_parse(read_bytes(p), p.string());
}

// 2 ranks x batch 4 must train like 1 rank x batch 8: the loader gives rank r the
// r-th half of every global batch, gradients are averaged, rank 0's init is broadcast.
// Only the order of fp32 additions differs (a mean over 8 rows vs two means over 4 rows
// averaged), ~1e-7 relative per step; AdamW's normalised update keeps that from
// growing much over 10 steps. Tolerances: 1e-4 relative on losses, 1e-4 absolute on
// weights (learning rate 3e-3: one step moves a weight by up to ~3e-3).
TEST_F(Ddp, TwoRanksMatchOneRankWithTwiceTheBatch) {
  const std::string common = " --set train.steps=10 train.warmup_steps=2 train.eval_batches=1";
  auto one = run_aiscale("train -q -c " + config_ + common + " train.batch_size=8 run.name=one");
  ASSERT_EQ(one.exit_code, 0) << one.output;
  auto two = run_aiscale("launch -n 2 --threads-per-rank 1 -- train -q -c " + config_ + common +
                         " train.batch_size=4 run.name=two");
  ASSERT_EQ(two.exit_code, 0) << two.output;
  EXPECT_NE(two.output.find("2 rank(s) [mpi]"), std::string::npos) << two.output;
  auto m1 = read_metrics(dir_ / "runs/one"), m2 = read_metrics(dir_ / "runs/two");
  ASSERT_EQ(m1.size(), 10u);
  ASSERT_EQ(m2.size(), 10u);
  for (size_t i = 0; i < m1.size(); ++i) {
    double a = m1[i]["loss"], b = m2[i]["loss"];
    EXPECT_NEAR(a, b, 1e-4 * std::abs(a)) << "step " << i + 1;
  }
  auto w1 = weights(dir_ / "runs/one", 10), w2 = weights(dir_ / "runs/two", 10);
  double max_diff = 0;
  for (const auto& [name, t] : w1) {
    const auto& u = w2.at(name);
    for (size_t i = 0; i < t.data.size(); ++i)
      max_diff = std::max(max_diff, static_cast<double>(std::abs(t.data[i] - u.data[i])));
  }
  EXPECT_LT(max_diff, 1e-4);
}

TEST_F(Ddp, DeadRankEndsTheJobQuickly) {
  auto start = std::chrono::steady_clock::now();
  auto r = run_aiscale("launch -n 2 --threads-per-rank 1 -- train -q -c " + config_ +
                           " --set run.name=dead train.steps=50 parallel.timeout_s=20",
                       "AISCALE_FAULT=kill@3:1");
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_LT(seconds, 60.0) << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "runs/dead/summary.json"));
}

// A straggler (AISCALE_FAULT=slow@1:MS: rank 1 waits before every backward) changes
// nothing but time: the same losses, bit for bit on the CPU, and the steps take at least
// the injected wait. A malformed fault is refused, naming the forms it understands.
TEST_F(Ddp, StragglerChangesNothingButTime) {
  const std::string common = " --set train.steps=4 train.warmup_steps=2 train.eval_batches=1 train.batch_size=4";
  auto even = run_aiscale("launch -n 2 --threads-per-rank 1 -- train -q -c " + config_ + common +
                          " run.name=even");
  ASSERT_EQ(even.exit_code, 0) << even.output;
  auto start = std::chrono::steady_clock::now();
  auto slow = run_aiscale("launch -n 2 --threads-per-rank 1 -- train -q -c " + config_ + common +
                              " run.name=straggler",
                          "AISCALE_FAULT=slow@1:250");
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_EQ(slow.exit_code, 0) << slow.output;
  EXPECT_GE(seconds, 4 * 0.25);
  auto a = read_metrics(dir_ / "runs/even"), b = read_metrics(dir_ / "runs/straggler");
  ASSERT_EQ(a.size(), 4u);
  ASSERT_EQ(b.size(), 4u);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(double(a[i]["loss"]), double(b[i]["loss"])) << "step " << i + 1;
  auto bad = run_aiscale("train -q -c " + config_ + common + " run.name=bad", "AISCALE_FAULT=slow@one");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("slow@RANK:MS"), std::string::npos) << bad.output;
}

TEST_F(Ddp, SigtermOnAllRanksCheckpointsAndResumes) {
  auto r = run_aiscale("launch -n 2 --threads-per-rank 1 -- train -q -c " + config_ +
                           " --set run.name=term train.steps=12",
                       "AISCALE_FAULT=term@6");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::exists(dir_ / "runs/term/checkpoints/step_00000006/COMPLETE"));
  r = run_aiscale("launch -n 2 --threads-per-rank 1 -- train -q --resume " + (dir_ / "runs/term").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::exists(dir_ / "runs/term/checkpoints/step_00000012/COMPLETE"));
  EXPECT_EQ(read_metrics(dir_ / "runs/term").size(), 12u);
  // Resumed on another number of ranks it goes on, saying what changed: the same samples in
  // the same order, half as many a step (tests/mpi/resume_layout_mpitest.cpp resumes the
  // layouts into each other).
  r = run_aiscale("train -q --resume " + (dir_ / "runs/term").string() + " --set train.steps=14");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("tokens per step change from 256"), std::string::npos) << r.output;
  EXPECT_EQ(read_metrics(dir_ / "runs/term").size(), 14u);
}

}  // namespace
