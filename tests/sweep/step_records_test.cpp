// steps.jsonl of a one-process training run: a line per step with its timings and epoch
// flags, epoch records with their training and validation parts, the memory event.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "aiscale/sweep/statistics.h"
#include "../support/run_support.h"

namespace aiscale::sweep {
namespace {

// The parameters of a finished run, from its summary.
int64_t rec_params(const std::filesystem::path& run) {
  return nlohmann::json::parse(std::ifstream(run / "summary.json"))["n_params"].get<int64_t>();
}

TEST(StepRecords, TrainWritesStepsAndEpochs) {
  auto dir = testsupport::temp_dir("step-records");
  // 1000 tokens: 31 windows of 32, 7 batches of 4 per epoch.
  testsupport::write_byte_shards(dir, 1000, 2000);
  const std::string cfg = testsupport::tiny_config(dir);
  auto r = testsupport::run_aiscale("train --config " + cfg +
                                    " --quiet --set train.steps=9 --set train.eval_every=7 --set run.name=r");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  RunRecords rec = read_step_records((dir / "runs/r/steps.jsonl").string());
  ASSERT_EQ(rec.steps.size(), 9u);
  EXPECT_EQ(rec.world, 1);
  EXPECT_TRUE(rec.steps[0].warmup);
  EXPECT_FALSE(rec.steps[1].warmup);
  EXPECT_TRUE(rec.steps[0].first_in_epoch);
  EXPECT_TRUE(rec.steps[6].last_in_epoch);   // step 7 ends epoch 0
  EXPECT_TRUE(rec.steps[7].first_in_epoch);  // step 8 begins epoch 1
  EXPECT_EQ(rec.steps[7].epoch, 1);
  EXPECT_EQ(rec.steps[0].tokens, 4 * 32);
  EXPECT_EQ(rec.steps[0].samples, 4);
  for (const auto& s : rec.steps) {
    EXPECT_GT(s.step_time_s, 0);
    EXPECT_GE(s.data_wait_s, 0);
    EXPECT_LT(s.data_wait_s, s.step_time_s);
  }
  ASSERT_EQ(rec.epochs.size(), 2u);
  EXPECT_TRUE(rec.epochs[0].complete);
  EXPECT_EQ(rec.epochs[0].first_step, 1);
  EXPECT_EQ(rec.epochs[0].last_step, 7);
  EXPECT_GT(rec.epochs[0].val_s, 0);  // eval_every = 7 validates after step 7
  EXPECT_GE(rec.epochs[0].wall_s, rec.epochs[0].train_s + rec.epochs[0].val_s);
  EXPECT_FALSE(rec.epochs[1].complete);
  EXPECT_GT(rec.epochs[1].val_s, 0);  // the final validation
  // Per rank: the memory, and the optimizer state the data-parallel wrapper holds (AdamW's
  // two moments of every parameter on one rank).
  ASSERT_EQ(rec.events.size(), 2u);
  EXPECT_EQ(rec.events[0]["event"], "memory");
  EXPECT_GT(rec.events[0]["peak_memory_bytes"].get<double>(), 0);
  EXPECT_EQ(rec.events[1]["event"], "optimizer_state");
  EXPECT_EQ(rec.events[1]["optimizer_state_bytes"].get<double>(),
            8.0 * double(rec_params(dir / "runs/r")));
}

TEST(StepRecords, AResumedRunKeepsEachStepOnce) {
  auto dir = testsupport::temp_dir("step-records-resume");
  testsupport::write_byte_shards(dir, 1000, 2000);
  const std::string cfg = testsupport::tiny_config(dir);
  auto r = testsupport::run_aiscale("train --config " + cfg + " --quiet --set train.steps=9 --set run.name=r",
                                    "AISCALE_FAULT=term@5");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_EQ(read_step_records((dir / "runs/r/steps.jsonl").string()).steps.size(), 5u);
  r = testsupport::run_aiscale("train --resume " + (dir / "runs/r").string() + " --quiet");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  RunRecords rec = read_step_records((dir / "runs/r/steps.jsonl").string());
  ASSERT_EQ(rec.steps.size(), 9u);
  for (size_t i = 0; i < rec.steps.size(); ++i) EXPECT_EQ(rec.steps[i].step, int64_t(i) + 1);
  EXPECT_TRUE(rec.steps[5].warmup);  // the resumed run's first step
  // Epoch 0 (steps 1-7) was cut by the stop: the first run recorded it incomplete, the
  // resumed run its part from step 6; epoch 1 follows.
  ASSERT_EQ(rec.epochs.size(), 2u);
  EXPECT_EQ(rec.epochs[0].first_step, 6);
  EXPECT_TRUE(rec.epochs[0].complete);
  EXPECT_EQ(rec.epochs[1].epoch, 1);
}

TEST(StepRecords, BenchRunDirectory) {
  auto dir = testsupport::temp_dir("bench-run-dir");
  const std::string run = (dir / "b").string();
  auto r = testsupport::run_aiscale("bench language --model gpt-tiny --batch 2 --seq 16 --steps 3 "
                                    "--warmup 1 --threads 1 --run-dir " + run);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  RunRecords rec = read_step_records(run + "/steps.jsonl");
  ASSERT_EQ(rec.steps.size(), 4u);
  EXPECT_TRUE(rec.steps[0].warmup);
  EXPECT_FALSE(rec.steps[3].warmup);
  EXPECT_EQ(rec.steps[0].tokens, 32);
  auto j = nlohmann::json::parse(testsupport::read_bytes(dir / "b/bench.jsonl"));
  EXPECT_EQ(j["benchmark"], "language");
  // A folder holding a result is refused.
  r = testsupport::run_aiscale("bench language --model gpt-tiny --batch 2 --seq 16 --steps 1 --run-dir " + run);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("already holds a benchmark result"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace aiscale::sweep
