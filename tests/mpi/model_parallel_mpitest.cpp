// Tensor parallelism, pipeline stages and ZeRO-2/3 on CPU ranks over MPI (through `aiscale
// launch`): each layout trains like one rank with the same global batch, a checkpoint
// written at one tensor-parallel size resumes at another, and the benchmark runs the layouts.
//
// Tolerance: the layouts sum the same fp32 values in another order (a row-parallel matmul
// adds two half sums, the vocabulary-parallel cross-entropy sums exponentials per slice,
// reduce-scatter and all-reduce order their sums differently), ~1e-7 relative per value;
// over 20 AdamW steps at lr 3e-3 that stays well inside 2e-4 of the loss.
#include <gtest/gtest.h>

#include <cmath>

#include "aiscale/train/checkpoint.h"
#include "aiscale/train/safetensors.h"
#include "../support/run_support.h"

using namespace aiscale;
using namespace aiscale::testsupport;

namespace {

class ModelParallel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = temp_dir("model-parallel");
    write_byte_shards(dir_);
    config_ = tiny_config(dir_);
    // The reference: one rank, batch 8.
    auto one = train("", 1, "train.batch_size=8 run.name=one");
    ASSERT_EQ(one.exit_code, 0) << one.output;
  }
  static RunOutput train(const std::string& env, int ranks, const std::string& sets) {
    const std::string common = " --set train.steps=20 train.warmup_steps=2 train.eval_batches=1 ";
    const std::string launch = ranks == 1 ? "" : "launch -n " + std::to_string(ranks) + " --threads-per-rank 1 -- ";
    return run_aiscale(launch + "train -q -c " + config_ + common + sets, env);
  }
  static void expect_like_one(const std::string& run) { expect_like("one", run); }
  static void expect_like(const std::string& reference, const std::string& run) {
    auto a = read_metrics(dir_ / "runs" / reference), b = read_metrics(dir_ / "runs" / run);
    ASSERT_EQ(a.size(), 20u);
    ASSERT_EQ(b.size(), 20u);
    for (size_t i = 0; i < a.size(); ++i) {
      const double x = a[i]["loss"], y = b[i]["loss"];
      EXPECT_NEAR(x, y, 2e-4 * std::abs(x)) << run << " step " << i + 1;
      // The norm of the gradients, each value counted once whatever the layout holds twice.
      const double gx = a[i]["grad_norm"], gy = b[i]["grad_norm"];
      EXPECT_NEAR(gx, gy, 1e-3 * gx) << run << " step " << i + 1;
    }
    EXPECT_LT(double(b.back()["loss"]), double(b.front()["loss"]));
  }
  static void expect_same_losses(const std::string& run_a, const std::string& run_b) {
    auto a = read_metrics(dir_ / "runs" / run_a), b = read_metrics(dir_ / "runs" / run_b);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i)
      EXPECT_EQ(double(a[i]["loss"]), double(b[i]["loss"])) << run_b << " step " << i + 1;
  }
  static fs::path dir_;
  static std::string config_;
};
fs::path ModelParallel::dir_;
std::string ModelParallel::config_;

std::map<std::string, train::SafeTensor> weights(const fs::path& run, int step) {
  fs::path p = run / "checkpoints" / train::checkpoint_name(step) / "model.safetensors";
  return train::safetensors_parse(read_bytes(p), p.string());
}

TEST_F(ModelParallel, TensorParallelTwoRanksMatchesOneRank) {
  auto r = train("", 2, "train.batch_size=8 parallel.tensor_parallel=2 run.name=tp2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("dp 1 x tp 2 x pp 1"), std::string::npos) << r.output;
  expect_like_one("tp2");
  // The checkpoint holds the whole tensors, as a one-rank run writes them.
  auto w1 = weights(dir_ / "runs/one", 20), w2 = weights(dir_ / "runs/tp2", 20);
  ASSERT_EQ(w1.size(), w2.size());
  double max_diff = 0;
  for (const auto& [name, t] : w1) {
    const auto& u = w2.at(name);
    ASSERT_EQ(t.data.size(), u.data.size()) << name;
    for (size_t i = 0; i < t.data.size(); ++i)
      max_diff = std::max(max_diff, double(std::abs(t.data[i] - u.data[i])));
  }
  EXPECT_LT(max_diff, 2e-4);
}

// A vocabulary the tensor ranks do not divide: 257 token rows in slices of 129, the second
// rank's ending in one zero padding row that no token maps to and that takes no part in the
// softmax.
TEST_F(ModelParallel, TensorParallelSplitsAVocabularyItDoesNotDivide) {
  auto r = train("", 1, "train.batch_size=8 model.vocab_size=257 run.name=one-v257");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = train("", 2, "train.batch_size=8 model.vocab_size=257 parallel.tensor_parallel=2 "
                   "parallel.sequence_parallel=true run.name=tp2-v257");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_like("one-v257", "tp2-v257");
  // The checkpoint holds the 257 real rows.
  auto w = weights(dir_ / "runs/tp2-v257", 20);
  const auto& wte = w.at("wte.weight");
  ASSERT_EQ(wte.shape.size(), 2u);
  EXPECT_EQ(wte.shape[0], 257);
  EXPECT_EQ(wte.data.size(), size_t(257 * wte.shape[1]));
}

TEST_F(ModelParallel, SequenceParallelMatchesOneRank) {
  auto r = train("", 2, "train.batch_size=8 parallel.tensor_parallel=2 "
                        "parallel.sequence_parallel=true run.name=sp2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_like_one("sp2");
  // With activation recomputation per block: the LayerNorm outputs rebuilt and gathered
  // again in backward.
  r = train("", 2, "train.batch_size=8 parallel.tensor_parallel=2 parallel.sequence_parallel=true "
                   "train.recompute=true run.name=sp2-recompute");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_like_one("sp2-recompute");
  // Full recomputation: every layer's forward, with its collectives, run again in its
  // backward; the same arithmetic as without, so the same losses to the bit.
  r = train("", 2, "train.batch_size=8 parallel.tensor_parallel=2 parallel.sequence_parallel=true "
                   "train.recompute_layers=true run.name=sp2-recompute-layers");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_same_losses("sp2", "sp2-recompute-layers");
}

TEST_F(ModelParallel, DataTimesTensorOnFourRanksMatchesOneRank) {
  auto r = train("", 4, "train.batch_size=4 parallel.tensor_parallel=2 run.name=dp2tp2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("dp 2 x tp 2 x pp 1"), std::string::npos) << r.output;
  expect_like_one("dp2tp2");
}

TEST_F(ModelParallel, ZeroTwoAndThreeMatchOneRank) {
  for (int stage : {2, 3}) {
    const std::string name = "zero" + std::to_string(stage);
    auto r = train("", 2, "train.batch_size=4 parallel.zero_stage=" + std::to_string(stage) +
                              " run.name=" + name);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    expect_like_one(name);
  }
}

// Gradient accumulation with ZeRO-3 and tensor parallelism together (dp 2 x tp 2): two
// micro-steps of 2 rows on 2 data-parallel ranks are the one rank's batch of 8.
TEST_F(ModelParallel, ZeroThreeWithTensorParallelAndAccumulation) {
  auto r = train("", 4, "train.batch_size=2 train.grad_accum=2 parallel.tensor_parallel=2 "
                        "parallel.zero_stage=3 run.name=z3tp2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_like_one("z3tp2");
}

// Two pipeline stages (one layer each), the batch of 8 in micro-batches, both schedules:
// the same losses as one rank, and the bubble (the time a stage waits for the other)
// measured in every step's metrics and the summary.
TEST_F(ModelParallel, PipelineBothSchedulesMatchOneRank) {
  for (const std::string schedule : {"gpipe", "1f1b"}) {
    const std::string name = "pp2-" + schedule;
    auto r = train("", 2, "train.batch_size=8 parallel.pipeline_parallel=2 parallel.microbatches=4 "
                          "parallel.pipeline_schedule=" + schedule + " run.name=" + name);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("dp 1 x tp 1 x pp 2"), std::string::npos) << r.output;
    expect_like_one(name);
    auto m = read_metrics(dir_ / "runs" / name);
    for (const auto& rec : m) {
      ASSERT_TRUE(rec.contains("pipeline_bubble")) << rec.dump();
      EXPECT_GE(double(rec["pipeline_bubble"]), 0.0);
      EXPECT_LT(double(rec["pipeline_bubble"]), 1.0);
    }
    auto summary = nlohmann::json::parse(read_bytes(dir_ / "runs" / name / "summary.json"));
    EXPECT_TRUE(summary.contains("pipeline_bubble_median")) << summary.dump();
    EXPECT_EQ(summary["layout"]["pp"], 2);
  }
  // Full recomputation inside the stages (each holding two micro-batches' layer inputs
  // under 1F1B): the same losses to the bit.
  auto r = train("", 2, "train.batch_size=8 parallel.pipeline_parallel=2 parallel.microbatches=4 "
                        "parallel.pipeline_schedule=1f1b train.recompute_layers=true "
                        "run.name=pp2-1f1b-recompute-layers");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_same_losses("pp2-1f1b", "pp2-1f1b-recompute-layers");
}

// Every axis at once on 4 ranks: 2 tensor ranks x 2 stages, ZeRO-2 over a data axis of 1,
// activations recomputed per block.
TEST_F(ModelParallel, TensorTimesPipelineMatchesOneRank) {
  auto r = train("", 4, "train.batch_size=8 parallel.tensor_parallel=2 parallel.pipeline_parallel=2 "
                        "parallel.microbatches=2 parallel.zero_stage=2 train.recompute=true run.name=tp2pp2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_like_one("tp2pp2");
}

// 2 data-parallel pipelines of 2 stages, ZeRO-2 over them, and gradient accumulation: 2
// micro-steps of 2 rows (each in 2 micro-batches) on 2 copies are the one rank's 8 rows.
TEST_F(ModelParallel, DataTimesPipelineWithZeroTwoAndAccumulation) {
  auto r = train("", 4, "train.batch_size=2 train.grad_accum=2 parallel.pipeline_parallel=2 "
                        "parallel.microbatches=2 parallel.zero_stage=2 run.name=dp2pp2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("dp 2 x tp 1 x pp 2"), std::string::npos) << r.output;
  expect_like_one("dp2pp2");
}

// Saved at tp = 2, resumed at tp = 1, and the other way: the same losses as the run that
// never stopped.
TEST_F(ModelParallel, CheckpointsMoveBetweenTensorParallelSizes) {
  auto a = train("", 2, "train.batch_size=8 parallel.tensor_parallel=2 train.steps=20 "
                        "run.checkpoint_every=10 run.name=move");
  ASSERT_EQ(a.exit_code, 0) << a.output;
  // Resume from step 10 on one rank.
  auto b = run_aiscale("train -q --resume " + (dir_ / "runs/move").string() +
                       " --checkpoint 10 --set parallel.tensor_parallel=1");
  ASSERT_EQ(b.exit_code, 0) << b.output;
  expect_like_one("move");
  // And back: a one-rank run stopped at 10 resumes at tp = 2.
  auto c = train("", 1, "train.batch_size=8 run.checkpoint_every=10 run.name=back");
  ASSERT_EQ(c.exit_code, 0) << c.output;
  auto d = run_aiscale("launch -n 2 --threads-per-rank 1 -- train -q --resume " +
                       (dir_ / "runs/back").string() +
                       " --checkpoint 10 --set parallel.tensor_parallel=2");
  ASSERT_EQ(d.exit_code, 0) << d.output;
  expect_like_one("back");
}

// A pipeline's checkpoint (its stages gathered) resumes as tensor slices with ZeRO-3.
TEST_F(ModelParallel, PipelineCheckpointResumesAsTensorParallelWithZeroThree) {
  auto a = train("", 2, "train.batch_size=8 parallel.pipeline_parallel=2 parallel.microbatches=2 "
                        "run.checkpoint_every=10 run.name=pp-to-tp");
  ASSERT_EQ(a.exit_code, 0) << a.output;
  auto b = run_aiscale("launch -n 2 --threads-per-rank 1 -- train -q --resume " +
                       (dir_ / "runs/pp-to-tp").string() +
                       " --checkpoint 10 --set parallel.pipeline_parallel=1 parallel.microbatches=1 "
                       "parallel.tensor_parallel=2 parallel.zero_stage=3");
  ASSERT_EQ(b.exit_code, 0) << b.output;
  expect_like_one("pp-to-tp");
}

TEST_F(ModelParallel, RankCountNotAMultipleIsRefused) {
  auto r = train("", 3, "train.batch_size=8 parallel.tensor_parallel=2 run.name=bad");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("launch a multiple of 2 ranks"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "runs/bad/summary.json"));
}

// The throughput benchmark at tp = 2: the ranks of the tensor group train one model on the
// same batches, so the record counts each token once per group.
TEST(ModelParallelBench, BenchLanguageRunsTensorParallel) {
  const fs::path out = temp_dir("model-parallel-bench") / "tp.jsonl";
  auto r = run_aiscale("launch -n 2 --threads-per-rank 1 -- bench language --model gpt-tiny "
                       "--batch 2 --seq 32 --tensor-parallel 2 --steps 2 --warmup 1 --output " +
                       out.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string text = read_bytes(out);
  const nlohmann::json j = nlohmann::json::parse(text.substr(0, text.find('\n')));
  EXPECT_EQ(int(j["tensor_parallel"]), 2) << text;
  EXPECT_EQ(int(j["world_size"]), 2) << text;
  const double per_device = j["tokens_per_s_per_device"], total = j["tokens_per_s"];
  EXPECT_NEAR(total, 2 * per_device, 1e-6 * total);
  EXPECT_NEAR(per_device, 2 * 32 / 2 / double(j["step_time_median_s"]), 1e-6 * per_device);
}

}  // namespace

// The benchmark with two pipeline stages: the stages train one model on the same batches
// (each token counted once per pipeline), and the record carries the schedule and the
// share of a step the stages spent waiting for each other.
TEST(ModelParallelBench, BenchLanguageRunsPipelineStages) {
  const fs::path out = temp_dir("model-parallel-bench-pp") / "pp.jsonl";
  auto r = run_aiscale("launch -n 2 --threads-per-rank 1 -- bench language --model gpt-tiny "
                       "--batch 4 --seq 32 --pipeline-parallel 2 --pipeline-schedule gpipe "
                       "--microbatches 2 --steps 2 --warmup 1 --output " + out.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string text = read_bytes(out);
  const nlohmann::json j = nlohmann::json::parse(text.substr(0, text.find('\n')));
  EXPECT_EQ(int(j["pipeline_parallel"]), 2) << text;
  EXPECT_EQ(int(j["data_parallel"]), 1) << text;
  EXPECT_EQ(j["pipeline_schedule"], "gpipe") << text;
  EXPECT_EQ(int(j["microbatches"]), 2) << text;
  const double bubble = j["pipeline_bubble_median"];
  EXPECT_GT(bubble, 0.0) << text;  // a stage of two always waits for the other
  EXPECT_LT(bubble, 1.0) << text;
  const double per_device = j["tokens_per_s_per_device"];
  EXPECT_NEAR(per_device, 4 * 32 / 2 / double(j["step_time_median_s"]), 1e-6 * per_device);
}
