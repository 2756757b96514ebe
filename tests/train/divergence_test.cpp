// Divergence stops a run with its last good state kept and a non-zero exit; problems that
// would only show after training (bad validation data) are found before step 1.
#include <gtest/gtest.h>

#include <cmath>

#include "aiscale/train/checkpoint.h"
#include "aiscale/train/divergence.h"
#include "aiscale/train/session.h"
#include "../support/run_support.h"

using namespace aiscale;
using namespace aiscale::testsupport;

namespace {

TEST(DivergenceDetector, JudgesAgainstTheRunningMean) {
  train::DivergenceDetector d(5.0, 4);
  EXPECT_FALSE(d.observe(1, 100.0));  // too few steps to judge
  for (int s = 2; s <= 6; ++s) EXPECT_FALSE(d.observe(s, 3.0 - 0.1 * s));  // a falling loss
  EXPECT_FALSE(d.observe(7, 10.0));   // 3.9x the mean of the last four: a spike, not divergence
  auto why = d.observe(8, 60.0);
  ASSERT_TRUE(why.has_value());
  EXPECT_NE(why->find("step 8"), std::string::npos) << *why;
  EXPECT_FALSE(d.observe(9, std::nan("")));  // non-finite losses are counted elsewhere
  train::DivergenceDetector off(0.0, 4);
  for (int s = 1; s <= 10; ++s) EXPECT_FALSE(off.observe(s, std::pow(10.0, s)));
}

class DivergenceRun : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = temp_dir("divergence");
    write_byte_shards(dir_, 20000, 2000);
    config_ = tiny_config(dir_);
  }
  static fs::path dir_;
  static std::string config_;
};
fs::path DivergenceRun::dir_;
std::string DivergenceRun::config_;

TEST_F(DivergenceRun, LossBlowupStopsWithExitThreeAndKeepsTheLastGoodCheckpoint) {
  auto r = run_aiscale("train -q -c " + config_ +
                           " --set run.name=blowup train.steps=20 run.checkpoint_every=4",
                       "AISCALE_FAULT=blowup@10");
  EXPECT_EQ(r.exit_code, train::kExitDiverged) << r.output;
  EXPECT_NE(r.output.find("diverged"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("step 11"), std::string::npos) << r.output;
  auto summary = nlohmann::json::parse(read_bytes(dir_ / "runs/blowup/summary.json"));
  EXPECT_EQ(summary["status"], "diverged");
  EXPECT_EQ(summary["steps"], 11);
  // The checkpoints before the blow-up are kept; none was written of the diverged weights.
  auto latest = train::latest_checkpoint((dir_ / "runs/blowup/checkpoints").string());
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(fs::path(*latest).filename(), "step_00000008");
  EXPECT_EQ(summary["checkpoint"], *latest);
}

TEST_F(DivergenceRun, TooManyNonFiniteStepsCheckpointTheLastGoodState) {
  auto r = run_aiscale("train -q -c " + config_ +
                           " --set run.name=nan train.steps=8 train.max_nonfinite_steps=0",
                       "AISCALE_FAULT=nan@3");
  EXPECT_EQ(r.exit_code, train::kExitDiverged) << r.output;
  EXPECT_NE(r.output.find("train.max_nonfinite_steps"), std::string::npos) << r.output;
  auto summary = nlohmann::json::parse(read_bytes(dir_ / "runs/nan/summary.json"));
  EXPECT_EQ(summary["status"], "diverged");
  // Step 3's update was skipped: the model holds the state after step 2, saved as step 3.
  EXPECT_TRUE(fs::exists(dir_ / "runs/nan/checkpoints/step_00000003/COMPLETE"));
  r = run_aiscale("train -q --resume " + (dir_ / "runs/nan").string() +
                  " --set train.max_nonfinite_steps=10");
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

// Validation data with a token outside the vocabulary: found before step 1, not after the
// whole run at the final evaluation (which lost the trained state).
TEST_F(DivergenceRun, BadValidationDataIsFoundBeforeTraining) {
  fs::path bad = dir_ / "bad";
  fs::create_directories(bad);
  std::vector<int32_t> tokens(3000, 65);
  tokens[100] = 300;  // beyond vocab_size = 256
  data::write_token_shard(bad / "val_000000.bin", std::span<const int32_t>(tokens));
  auto r = run_aiscale("train -q -c " + config_ + " --set run.name=badval train.steps=20 data.val=" +
                       (bad / "val_*.bin").string());
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("token id 300"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("val_*.bin"), std::string::npos) << r.output;
  EXPECT_TRUE(read_metrics(dir_ / "runs/badval").empty());  // not one step was trained
}

}  // namespace
