// The llama family (llama-tiny: grouped-query attention, rotary positions, SwiGLU, an
// untied LM head) on CPU ranks over MPI: data parallelism, tensor parallelism (key/value
// heads split), sequence parallelism, pipeline stages (the untied head on the last stage)
// and ZeRO-2/3 each train like one rank with the same global batch; tensor parallelism
// that would split a key/value head is refused by name.
//
// Tolerance: as model_parallel_mpitest.cpp's (the same sums in another order).
#include <gtest/gtest.h>

#include <cmath>

#include "aiscale/train/checkpoint.h"
#include "aiscale/train/safetensors.h"
#include "../support/run_support.h"

using namespace aiscale;
using namespace aiscale::testsupport;

namespace {

class LlamaParallel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = temp_dir("llama-parallel");
    write_byte_shards(dir_);
    std::string cfg = "[model]\npreset = \"llama-tiny\"\nblock_size = 32\n"
                      "[data]\ntrain = \"" + (dir_ / "tiny_train_*.bin").string() + "\"\n"
                      "val = \"" + (dir_ / "tiny_val_*.bin").string() + "\"\ntokenizer = \"byte\"\n"
                      "[train]\nbatch_size = 4\nseq_len = 32\nsteps = 20\nwarmup_steps = 2\nlr = 3e-3\n"
                      "threads = 1\neval_batches = 1\n"
                      "[run]\ndir = \"" + (dir_ / "runs").string() + "\"\n";
    std::ofstream(dir_ / "llama.toml") << cfg;
    config_ = (dir_ / "llama.toml").string();
    auto one = train(1, "train.batch_size=8 run.name=one");
    ASSERT_EQ(one.exit_code, 0) << one.output;
  }
  static RunOutput train(int ranks, const std::string& sets) {
    const std::string launch =
        ranks == 1 ? "" : "launch -n " + std::to_string(ranks) + " --threads-per-rank 1 -- ";
    return run_aiscale(launch + "train -q -c " + config_ + " --set " + sets);
  }
  static void expect_like_one(const std::string& run) {
    auto a = read_metrics(dir_ / "runs/one"), b = read_metrics(dir_ / "runs" / run);
    ASSERT_EQ(a.size(), 20u);
    ASSERT_EQ(b.size(), 20u);
    for (size_t i = 0; i < a.size(); ++i) {
      const double x = a[i]["loss"], y = b[i]["loss"];
      EXPECT_NEAR(x, y, 2e-4 * std::abs(x)) << run << " step " << i + 1;
      const double gx = a[i]["grad_norm"], gy = b[i]["grad_norm"];
      EXPECT_NEAR(gx, gy, 1e-3 * gx) << run << " step " << i + 1;
    }
    EXPECT_LT(double(b.back()["loss"]), double(b.front()["loss"]));
  }
  static fs::path dir_;
  static std::string config_;
};
fs::path LlamaParallel::dir_;
std::string LlamaParallel::config_;

TEST_F(LlamaParallel, DataParallelTwoRanksMatchesOneRank) {
  auto r = train(2, "train.batch_size=4 run.name=ddp2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_like_one("ddp2");
}

TEST_F(LlamaParallel, TensorParallelTwoRanksMatchesOneRank) {
  auto r = train(2, "train.batch_size=8 parallel.tensor_parallel=2 run.name=tp2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("dp 1 x tp 2 x pp 1"), std::string::npos) << r.output;
  expect_like_one("tp2");
  // The checkpoint holds whole tensors (Q, K, V and gate, up gathered from their slices):
  // the one-rank run's, up to the order of the sums.
  auto path = [&](const char* run) {
    return dir_ / "runs" / run / "checkpoints" / train::checkpoint_name(20) / "model.safetensors";
  };
  auto w1 = train::safetensors_parse(read_bytes(path("one")), "one");
  auto w2 = train::safetensors_parse(read_bytes(path("tp2")), "tp2");
  ASSERT_EQ(w1.size(), w2.size());
  ASSERT_TRUE(w1.count("lm_head.weight"));
  double max_diff = 0;
  for (const auto& [name, t] : w1) {
    const auto& u = w2.at(name);
    ASSERT_EQ(t.data.size(), u.data.size()) << name;
    for (size_t i = 0; i < t.data.size(); ++i)
      max_diff = std::max(max_diff, double(std::abs(t.data[i] - u.data[i])));
  }
  EXPECT_LT(max_diff, 2e-4);
}

TEST_F(LlamaParallel, SequenceParallelAndRecomputationMatchOneRank) {
  auto r = train(2, "train.batch_size=8 parallel.tensor_parallel=2 parallel.sequence_parallel=true "
                    "train.recompute=true run.name=sp2-recompute");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_like_one("sp2-recompute");
  r = train(2, "train.batch_size=8 parallel.tensor_parallel=2 train.recompute_layers=true "
               "run.name=tp2-recompute-layers");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_like_one("tp2-recompute-layers");
}

TEST_F(LlamaParallel, PipelineTwoStagesMatchesOneRank) {
  auto r = train(2, "train.batch_size=8 parallel.pipeline_parallel=2 parallel.microbatches=4 "
                    "parallel.pipeline_schedule=1f1b run.name=pp2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("dp 1 x tp 1 x pp 2"), std::string::npos) << r.output;
  expect_like_one("pp2");
}

TEST_F(LlamaParallel, ZeroTwoAndThreeMatchOneRank) {
  for (int stage : {2, 3}) {
    const std::string name = "zero" + std::to_string(stage);
    auto r = train(2, "train.batch_size=4 parallel.zero_stage=" + std::to_string(stage) +
                          " run.name=" + name);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    expect_like_one(name);
  }
}

// 2 key/value heads do not split over 4 tensor ranks: refused before training, naming the
// key and the parallelism.
TEST_F(LlamaParallel, TensorParallelMustDivideTheKeyValueHeads) {
  auto r = train(4, "train.batch_size=8 parallel.tensor_parallel=4 run.name=tp4");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("model.n_kv_head"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("parallel.tensor_parallel"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "runs/tp4/summary.json"));
}

}  // namespace
