// Divergence stops a run with its last good state kept and a non-zero exit; problems that
// would only show after training (bad validation data) are found before step 1.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <random>

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
  // Step 8's loss came from the state after step 7: the last good state is step 6's.
  EXPECT_EQ(d.last_good_step(), 6);
  EXPECT_FALSE(d.observe(9, std::nan("")));  // non-finite losses are counted elsewhere
  train::DivergenceDetector off(0.0, 4);
  for (int s = 1; s <= 10; ++s) EXPECT_FALSE(off.observe(s, std::pow(10.0, s)));
}

// A loss that falls from 5 to about 2 over 300 steps (with noise), then climbs 0.01 a
// step: no step is far above the ones before it, so only the climb check can see it.
TEST(DivergenceDetector, CatchesASustainedClimbThatNoStepShowsAsASpike) {
  train::DivergenceDetector d(5.0, 20, 1.5, 100);
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> noise(-0.1, 0.1);
  std::optional<std::string> why;
  int64_t step = 0;
  for (step = 1; step <= 2000 && !why; ++step) {
    const double trend = step <= 300 ? 2.0 + 3.0 * std::exp(-step / 60.0) : 2.0 + 0.01 * double(step - 300);
    why = d.observe(step, trend + noise(rng));
  }
  ASSERT_TRUE(why.has_value()) << "a climb from 2 to 20 was not caught";
  --step;
  // Caught once the median of the last 100 steps passes 1.5 x ~2.05: about step 300 + 150.
  EXPECT_GT(step, 400);
  EXPECT_LT(step, 520);
  EXPECT_NE(why->find("sustained"), std::string::npos) << *why;
  EXPECT_NE(why->find("train.divergence_climb_factor = 1.5"), std::string::npos) << *why;
  EXPECT_NE(why->find("train.divergence_climb_window = 100"), std::string::npos) << *why;
  // The good state ends where the lowest window ended, around the bottom of the curve.
  EXPECT_GE(d.last_good_step(), 280);
  EXPECT_LE(d.last_good_step(), 360);
  // ... inside the lowest window the message names ("steps A-B;"), before its last step.
  const std::string lowest = why->substr(why->rfind("steps ") + 6);
  EXPECT_GE(d.last_good_step() + 1, std::stoll(lowest)) << *why;
  EXPECT_LT(d.last_good_step() + 1, std::stoll(lowest.substr(lowest.find('-') + 1))) << *why;

  train::DivergenceDetector off(5.0, 20, 0.0, 100);
  for (int64_t s = 1; s <= 2000; ++s)
    ASSERT_FALSE(off.observe(s, 2.0 + 0.01 * double(s))) << "climb check off, step " << s;
}

// What healthy runs look like is never called divergence: a noisy descent with plateaus
// and isolated bumps, a late rise of a fifth, and a near-zero loss with heavy-tailed noise
// (its rare large values are far above the level, but they are isolated).
TEST(DivergenceDetector, NoisyDescentsAndIsolatedBumpsAreNeverAClimb) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> noise(0.7, 1.3);
  train::DivergenceDetector d(5.0, 20, 1.5, 100);
  for (int64_t s = 1; s <= 6000; ++s) {
    double loss = (2.0 + 3.0 * std::exp(-double(s) / 800.0)) * noise(rng);
    if (s % 97 == 0) loss *= 3.0;          // an isolated bump, below the spike factor
    if (s > 4000) loss *= 1.2;             // a late rise of 20 %: worse, not diverged
    ASSERT_FALSE(d.observe(s, loss)) << "step " << s;
  }
  train::DivergenceDetector tiny(0.0, 20, 1.5, 100);  // the climb check alone
  for (int64_t s = 1; s <= 3000; ++s) {
    const double loss = s % 3 == 0 ? 0.5 : 0.01 * noise(rng);
    ASSERT_FALSE(tiny.observe(s, loss)) << "step " << s;
  }
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
  EXPECT_NE(r.output.find("The last good state is checkpoint " + *latest), std::string::npos)
      << r.output;
  EXPECT_FALSE(summary.contains("diverged_checkpoint"));
}

// A run that diverges before its first checkpoint: the diverged weights are kept, under a
// name that says so and that --resume never takes; no step_N checkpoint presents them as
// the last good state.
TEST_F(DivergenceRun, DivergedStateWithoutAGoodCheckpointIsKeptAsideNeverResumed) {
  auto r = run_aiscale("train -q -c " + config_ + " --set run.name=early train.steps=20",
                       "AISCALE_FAULT=blowup@10");
  EXPECT_EQ(r.exit_code, train::kExitDiverged) << r.output;
  const fs::path ckpts = dir_ / "runs/early/checkpoints";
  EXPECT_TRUE(fs::exists(ckpts / "diverged-step_00000011/COMPLETE")) << r.output;
  EXPECT_TRUE(fs::exists(ckpts / "diverged-step_00000011/model.safetensors"));
  EXPECT_FALSE(train::latest_checkpoint(ckpts.string()).has_value());
  auto summary = nlohmann::json::parse(read_bytes(dir_ / "runs/early/summary.json"));
  EXPECT_TRUE(summary["checkpoint"].is_null()) << summary.dump();
  EXPECT_EQ(summary["diverged_checkpoint"], (ckpts / "diverged-step_00000011").string());
  EXPECT_NE(r.output.find("No checkpoint holds a good state"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("never resumed from"), std::string::npos) << r.output;
  r = run_aiscale("train -q --resume " + (dir_ / "runs/early").string());
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("resuming"), std::string::npos) << r.output;
}

// A climb (the spike check off): the checkpoints written after the last good state are set
// aside as step_N.diverged, and the newest one left — the one a plain --resume takes — is
// named as the last good state.
TEST_F(DivergenceRun, ClimbSetsAsideTheCheckpointsWrittenDuringIt) {
  auto r = run_aiscale("train -q -c " + config_ +
                           " --set run.name=climb train.steps=20 run.checkpoint_every=2 "
                           "run.keep_checkpoints=20 train.divergence_factor=0 "
                           "train.divergence_climb_factor=1.2 train.divergence_climb_window=4",
                       "AISCALE_FAULT=blowup@10");
  EXPECT_EQ(r.exit_code, train::kExitDiverged) << r.output;
  EXPECT_NE(r.output.find("sustained"), std::string::npos) << r.output;
  const fs::path ckpts = dir_ / "runs/climb/checkpoints";
  // Step 10's update ran on the blown-up weights: its checkpoint holds them.
  EXPECT_TRUE(fs::exists(ckpts / "step_00000010.diverged/COMPLETE")) << r.output;
  EXPECT_FALSE(fs::exists(ckpts / "step_00000010"));
  auto latest = train::latest_checkpoint(ckpts.string());
  ASSERT_TRUE(latest.has_value()) << r.output;
  EXPECT_LE(std::stoi(fs::path(*latest).filename().string().substr(5)), 8);
  auto summary = nlohmann::json::parse(read_bytes(dir_ / "runs/climb/summary.json"));
  EXPECT_EQ(summary["checkpoint"], *latest);
  bool listed = false;
  for (const auto& p : summary["checkpoints_set_aside"])
    listed = listed || p.get<std::string>() == (ckpts / "step_00000010.diverged").string();
  EXPECT_TRUE(listed) << summary.dump();
  EXPECT_NE(r.output.find("The last good state is checkpoint " + *latest), std::string::npos)
      << r.output;
}

TEST(DivergedCheckpoints, AreNeverListedResumedOrPruned) {
  const fs::path dir = temp_dir("diverged-ckpt");
  const fs::path ckpts = dir / "checkpoints";
  auto fake = [&](int64_t step) {
    fs::create_directories(ckpts / train::checkpoint_name(step));
    std::ofstream(ckpts / train::checkpoint_name(step) / "COMPLETE") << step << "\n";
  };
  for (int64_t step : {4, 8, 12, 16}) fake(step);
  const auto moved = train::set_aside_checkpoints_after(ckpts.string(), 9);
  ASSERT_EQ(moved.size(), 2u);
  EXPECT_EQ(moved[0], (ckpts / "step_00000012.diverged").string());
  EXPECT_EQ(moved[1], (ckpts / "step_00000016.diverged").string());
  EXPECT_EQ(train::complete_checkpoints(ckpts.string()),
            (std::vector<std::string>{(ckpts / "step_00000004").string(),
                                      (ckpts / "step_00000008").string()}));
  // A folder written under the diverged name is complete but no checkpoint to resume.
  fs::create_directories(ckpts / train::diverged_checkpoint_name(20));
  std::ofstream(ckpts / train::diverged_checkpoint_name(20) / "COMPLETE") << "20\n";
  EXPECT_EQ(train::latest_checkpoint(ckpts.string()), (ckpts / "step_00000008").string());
  // Pruning (keep 1) removes older good ones only.
  train::write_checkpoint_folder(ckpts.string(), 9, {{"state.json", "{}"}}, 1);
  EXPECT_FALSE(fs::exists(ckpts / "step_00000008"));
  EXPECT_TRUE(fs::exists(ckpts / "step_00000009/COMPLETE"));
  EXPECT_TRUE(fs::exists(ckpts / "step_00000012.diverged"));
  EXPECT_TRUE(fs::exists(ckpts / "diverged-step_00000020/COMPLETE"));
  fs::remove_all(dir);
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
