// `aiscale train --init-from DIR` on 2 CPU ranks (through `aiscale launch`): data
// parallelism and tensor parallelism start from the folder's weights and train like one
// rank with the same global batch.
//
// Tolerance as in model_parallel_mpitest.cpp: the layouts sum the same fp32 values in
// another order (~1e-7 relative per value), well inside 2e-4 of the loss over 10 steps.
#include <gtest/gtest.h>

#include <cmath>

#include "aiscale/core/fs.h"
#include "aiscale/nn/models/gpt.h"
#include "aiscale/train/hf_checkpoint.h"
#include "../support/run_support.h"

using namespace aiscale;
using namespace aiscale::testsupport;

namespace {

class InitFromRanks : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = temp_dir("init-from-ranks");
    write_byte_shards(dir_);
    config_ = tiny_config(dir_);
    // Seed 7's weights (x 3), sharded, trained with seed 1337's data order.
    nn::GptConfig c = nn::gpt_preset("gpt-tiny");
    c.block_size = 32;
    fs::create_directories(dir_ / "init");
    // Scaled, so that the first loss is far from a fresh model's (beyond the tolerance).
    std::vector<float> params = nn::gpt_init_params(c, 7);
    for (float& v : params) v *= 3.0f;
    for (const auto& [name, bytes] : train::hf_model_files(c, params, 20'000))
      atomic_write_file((dir_ / "init" / name).string(), bytes);
    auto one = train(1, "train.batch_size=8 run.name=one");
    ASSERT_EQ(one.exit_code, 0) << one.output;
    auto fresh = train(1, "train.batch_size=8 train.init_from= run.name=fresh");
    ASSERT_EQ(fresh.exit_code, 0) << fresh.output;
  }
  static RunOutput train(int ranks, const std::string& sets) {
    const std::string launch =
        ranks == 1 ? "" : "launch -n " + std::to_string(ranks) + " --threads-per-rank 1 -- ";
    return run_aiscale(launch + "train -q -c " + config_ + " --init-from " + (dir_ / "init").string() +
                       " --set train.steps=10 train.warmup_steps=2 train.eval_batches=1 " + sets);
  }
  static void expect_like_one(const std::string& run) {
    auto a = read_metrics(dir_ / "runs/one"), b = read_metrics(dir_ / "runs" / run);
    ASSERT_EQ(a.size(), 10u);
    ASSERT_EQ(b.size(), 10u);
    for (size_t i = 0; i < a.size(); ++i) {
      const double x = a[i]["loss"], y = b[i]["loss"];
      EXPECT_NEAR(x, y, 2e-4 * std::abs(x)) << run << " step " << i + 1;
    }
  }
  static fs::path dir_;
  static std::string config_;
};
fs::path InitFromRanks::dir_;
std::string InitFromRanks::config_;

TEST_F(InitFromRanks, OneRankStartsFromTheFolder) {
  // The weights make a difference far beyond the tolerance of the comparisons below.
  const double a = read_metrics(dir_ / "runs/one")[0]["loss"];
  const double b = read_metrics(dir_ / "runs/fresh")[0]["loss"];
  EXPECT_GT(std::abs(a - b), 1e-2 * std::abs(a));
}

TEST_F(InitFromRanks, DataParallelTwoRanksMatchesOneRank) {
  auto r = train(2, "train.batch_size=4 run.name=dp2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_like_one("dp2");
}

TEST_F(InitFromRanks, TensorParallelTwoRanksMatchesOneRank) {
  auto r = train(2, "train.batch_size=8 parallel.tensor_parallel=2 run.name=tp2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("dp 1 x tp 2 x pp 1"), std::string::npos) << r.output;
  expect_like_one("tp2");
}

TEST_F(InitFromRanks, ZeroThreeTwoRanksMatchesOneRank) {
  // Every rank keeps a shard of the parameters: each takes its own from the whole buffer.
  auto r = train(2, "train.batch_size=4 parallel.zero_stage=3 run.name=zero3");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_like_one("zero3");
}

}  // namespace
