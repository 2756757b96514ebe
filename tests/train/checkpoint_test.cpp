// Checkpoints and resilience, through the aiscale binary on a tiny model.
#include <gtest/gtest.h>

#include "aiscale/core/error.h"
#include "aiscale/train/checkpoint.h"
#include "aiscale/train/safetensors.h"
#include "../support/run_support.h"

using namespace aiscale;
using namespace aiscale::testsupport;

namespace {

fs::path final_weights(const fs::path& run, int step) {
  return run / "checkpoints" / train::checkpoint_name(step) / "model.safetensors";
}

std::vector<double> losses(const fs::path& run) {
  std::vector<double> out;
  for (const auto& m : read_metrics(run)) out.push_back(m.at("loss").get<double>());
  return out;
}

class ResumeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = temp_dir("resume");
    write_byte_shards(dir_);
    config_ = tiny_config(dir_);
    auto r = run_aiscale("train -q -c " + config_ + " --set run.name=straight run.checkpoint_every=5");
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  static fs::path dir_;
  static std::string config_;
};
fs::path ResumeTest::dir_;
std::string ResumeTest::config_;

TEST_F(ResumeTest, StopAtTenThenResumeIsBitIdentical) {
  auto r = run_aiscale("train -q -c " + config_ + " --set run.name=stopped", "AISCALE_FAULT=term@10");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("stopped by signal after step 10"), std::string::npos) << r.output;
  auto summary = nlohmann::json::parse(read_bytes(dir_ / "runs/stopped/summary.json"));
  EXPECT_EQ(summary["status"], "interrupted");
  EXPECT_TRUE(fs::exists(dir_ / "runs/stopped/checkpoints/step_00000010/COMPLETE"));
  r = run_aiscale("train -q --resume " + (dir_ / "runs/stopped").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(read_bytes(final_weights(dir_ / "runs/straight", 20)),
            read_bytes(final_weights(dir_ / "runs/stopped", 20)));
  EXPECT_EQ(losses(dir_ / "runs/straight"), losses(dir_ / "runs/stopped"));
}

TEST_F(ResumeTest, KillNineBetweenCheckpointsResumesFromLastComplete) {
  auto r = run_aiscale("train -q -c " + config_ + " --set run.name=killed run.checkpoint_every=4",
                   "AISCALE_FAULT=kill@10:0");
  EXPECT_EQ(r.exit_code, 128 + 9) << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "runs/killed/summary.json"));
  auto latest = train::latest_checkpoint((dir_ / "runs/killed/checkpoints").string());
  ASSERT_TRUE(latest.has_value());
  // The write of step 8 runs in the background and may not have finished when the
  // process died: then step 4 is the newest complete one. Either way resuming must work.
  std::string name = fs::path(*latest).filename().string();
  EXPECT_TRUE(name == "step_00000008" || name == "step_00000004") << name;
  r = run_aiscale("train -q --resume " + (dir_ / "runs/killed").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(read_bytes(final_weights(dir_ / "runs/straight", 20)),
            read_bytes(final_weights(dir_ / "runs/killed", 20)));
  EXPECT_EQ(losses(dir_ / "runs/straight"), losses(dir_ / "runs/killed"));
}

TEST_F(ResumeTest, IncompleteCheckpointIsIgnoredAndCorruptOneNamed) {
  fs::path run = dir_ / "runs/straight";
  // A checkpoint folder without its COMPLETE marker (crash mid-write) is never chosen.
  fs::create_directories(run / "checkpoints/step_00000099");
  auto latest = train::latest_checkpoint((run / "checkpoints").string());
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(fs::path(*latest).filename(), "step_00000020");
  fs::remove_all(run / "checkpoints/step_00000099");
  // Truncated weights: the error names the file.
  fs::path copy = dir_ / "corrupt";
  fs::copy(run / "checkpoints/step_00000020", copy, fs::copy_options::recursive);
  fs::resize_file(copy / "model.safetensors", 1000);
  try {
    train::read_checkpoint(copy.string(), true);
    FAIL() << "no error for a truncated checkpoint";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.safetensors"), std::string::npos) << e.what();
  }
}

TEST_F(ResumeTest, NanGradientSkipsTheUpdateAndTooManyStop) {
  auto r = run_aiscale("train -q -c " + config_ + " --set run.name=nan train.steps=6", "AISCALE_FAULT=nan@3");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("update skipped"), std::string::npos) << r.output;
  auto summary = nlohmann::json::parse(read_bytes(dir_ / "runs/nan/summary.json"));
  EXPECT_EQ(summary["nonfinite_steps"], 1);
  r = run_aiscale("train -q -c " + config_ + " --set run.name=nan2 train.steps=6 train.max_nonfinite_steps=0",
              "AISCALE_FAULT=nan@3");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("max_nonfinite_steps"), std::string::npos) << r.output;
}

TEST_F(ResumeTest, ExistingRunDirectoryIsNotOverwritten) {
  auto r = run_aiscale("train -q -c " + config_ + " --set run.name=straight");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("already exists"), std::string::npos) << r.output;
  EXPECT_TRUE(fs::exists(dir_ / "runs/straight/summary.json"));
}

TEST_F(ResumeTest, SampleFromCheckpoint) {
  auto r = run_aiscale("sample --run " + (dir_ / "runs/straight").string() +
                   " --prompt 'the ' --tokens 12 --temperature 0");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("the "), std::string::npos) << r.output;
}

TEST(Safetensors, RoundTripAndErrors) {
  std::vector<train::SafeTensor> ts = {{"a", {2, 3}, {1, 2, 3, 4, 5, 6}}, {"b", {1}, {7}}};
  std::string bytes = train::safetensors_serialize(ts, {{"k", "v"}});
  uint64_t header = 0;
  std::memcpy(&header, bytes.data(), 8);
  EXPECT_EQ((8 + header) % 8, 0u);
  auto back = train::safetensors_parse(bytes, "mem");
  EXPECT_EQ(back.at("a").data, ts[0].data);
  EXPECT_EQ(back.at("a").shape, ts[0].shape);
  EXPECT_EQ(back.at("b").data, ts[1].data);
  EXPECT_THROW(train::safetensors_parse(bytes.substr(0, bytes.size() - 4), "cut"), Error);
  EXPECT_THROW(train::safetensors_parse("xx", "tiny"), Error);
}

}  // namespace
