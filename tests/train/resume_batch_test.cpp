// Resuming one process with another batch or accumulation, and from a checkpoint whose
// data position still counts global batches (older aiscale), through the aiscale binary;
// paths given where a checkpoint or a run directory is wanted. The layouts of several
// ranks are tests/mpi/resume_layout_mpitest.cpp.
#include <gtest/gtest.h>

#include <cmath>

#include "aiscale/train/checkpoint.h"
#include "../support/run_support.h"

using namespace aiscale;
using namespace aiscale::testsupport;

namespace {

class ResumeBatch : public ::testing::Test {
 protected:
  // One rank, batch 8, 12 steps, a checkpoint every 4.
  static void SetUpTestSuite() {
    dir_ = temp_dir("resume-batch");
    write_byte_shards(dir_, 20000, 2000);
    config_ = tiny_config(dir_);
    auto r = run_aiscale("train -q -c " + config_ +
                         " --set run.name=straight train.steps=12 train.batch_size=8 "
                         "run.checkpoint_every=4 run.keep_checkpoints=5");
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  static fs::path copy_run(const std::string& name) {
    fs::path to = dir_ / "runs" / name;
    fs::remove_all(to);
    fs::copy(dir_ / "runs/straight", to, fs::copy_options::recursive);
    return to;
  }
  static nlohmann::json state(const fs::path& run, int step) {
    return nlohmann::json::parse(
        read_bytes(run / "checkpoints" / train::checkpoint_name(step) / "state.json"));
  }
  static fs::path dir_;
  static std::string config_;
};
fs::path ResumeBatch::dir_;
std::string ResumeBatch::config_;

// Steps 5-12 of `run` against the straight run: the same to the bit, or within `rel`.
void expect_losses_like_straight(const fs::path& straight, const fs::path& run, double rel) {
  auto a = read_metrics(straight), b = read_metrics(run);
  ASSERT_EQ(a.size(), 12u);
  ASSERT_EQ(b.size(), 12u);
  for (size_t i = 4; i < 12; ++i) {
    const double x = a[i]["loss"], y = b[i]["loss"];
    if (rel == 0) EXPECT_EQ(x, y) << "step " << i + 1;
    else EXPECT_NEAR(x, y, rel * std::abs(x)) << "step " << i + 1;
  }
}

// state.json as aiscale wrote it before the position counted samples: data_index global
// batches of world_size x batch_size windows, no layout fields. It converts exactly, so
// the resumed run is the run that never stopped, to the bit.
TEST_F(ResumeBatch, OlderCheckpointResumesBitIdentical) {
  const fs::path run = copy_run("legacy");
  const fs::path ck = run / "checkpoints" / train::checkpoint_name(4);
  nlohmann::ordered_json s = nlohmann::ordered_json::parse(read_bytes(ck / "state.json"));
  ASSERT_EQ(s["data_sample"], 32);
  nlohmann::ordered_json old;
  for (const char* k : {"step", "data_epoch", "seed", "world_size", "nonfinite_steps", "n_params",
                        "config_toml", "aiscale_version", "written"}) {
    old[k] = s[k];
    if (std::string(k) == "data_epoch") old["data_index"] = 4;
  }
  std::ofstream(ck / "state.json") << old.dump(2);
  auto r = run_aiscale("train -q --resume " + run.string() + " --checkpoint 4");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("converted to sample 32 of epoch 0"), std::string::npos) << r.output;
  expect_losses_like_straight(dir_ / "runs/straight", run, 0);
  EXPECT_EQ(state(run, 12)["data_sample"], 96);
}

// Two micro-steps of 4 rows in place of one of 8: the same samples per step, the same
// tokens per step (no note); the losses as the straight run's up to the order of the sums
// (the mean of two means of 4 against one mean of 8: ~1e-7 relative per step in fp32,
// 2e-5 allows for 8 AdamW steps).
TEST_F(ResumeBatch, AccumulationInPlaceOfBatchContinuesTheSameSamples) {
  const fs::path run = copy_run("accum");
  auto r = run_aiscale("train -q --resume " + run.string() +
                       " --checkpoint 4 --set train.batch_size=4 train.grad_accum=2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("tokens per step change"), std::string::npos) << r.output;
  expect_losses_like_straight(dir_ / "runs/straight", run, 2e-5);
  EXPECT_EQ(state(run, 12)["data_sample"], 96);
}

// Half the batch: said in a note, and the data goes on from the same sample (32) taking 4
// a step: 32 + 8 x 4 = 64 after step 12.
TEST_F(ResumeBatch, AnotherBatchSizeIsSaidAndContinuesFromTheSameSample) {
  const fs::path run = copy_run("half");
  auto r = run_aiscale("train -q --resume " + run.string() + " --checkpoint 4 --set train.batch_size=4");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("tokens per step change from 256 (dp 1 x batch_size 8 x grad_accum 1 x "
                          "seq_len 32) to 128 (dp 1 x batch_size 4"),
            std::string::npos) << r.output;
  EXPECT_NE(r.output.find("continues from sample 32 of epoch 0"), std::string::npos) << r.output;
  const nlohmann::json s = state(run, 12);
  EXPECT_EQ(s["data_sample"], 64);
  EXPECT_EQ(s["batch_size"], 4);
  // Another sequence length is refused, naming the one to resume with.
  r = run_aiscale("train -q --resume " + run.string() + " --set train.steps=14 train.seq_len=16");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("--set train.seq_len=32"), std::string::npos) << r.output;
}

// Directories where a checkpoint is wanted, and a checkpoint where a run directory is.
TEST_F(ResumeBatch, WrongKindOfDirectoryIsNamed) {
  const fs::path run = dir_ / "runs/straight";
  auto r = run_aiscale("sample --checkpoint " + run.string() + " -n 2");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("is a run directory, not a checkpoint"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("interrupted"), std::string::npos) << r.output;
  r = run_aiscale("sample --checkpoint " + (run / "checkpoints").string() + " -n 2");
  EXPECT_NE(r.output.find("is a folder of checkpoints"), std::string::npos) << r.output;
  r = run_aiscale("train -q --resume " + (run / "checkpoints" / train::checkpoint_name(8)).string());
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("--resume " + run.string() + " --checkpoint 8"), std::string::npos) << r.output;
}

}  // namespace
