// The parallel layout keys: every impossible layout is refused with a message naming the
// keys and the fix, before anything is allocated.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "aiscale/core/error.h"
#include "aiscale/parallel/grid.h"
#include "aiscale/train/config.h"
#include "aiscale/train/parallel_layout.h"

using aiscale::Error;
using aiscale::train::parallel_layout;
using aiscale::train::parse_train_config;
using aiscale::train::TrainConfig;

namespace {

// gpt-tiny: 2 layers, 2 heads, width 64, vocabulary 256.
const char* kTiny = "[model]\npreset = \"gpt-tiny\"\n[train]\nseq_len = 32\nbatch_size = 4\n";

std::string error_of(std::vector<std::string> overrides) {
  try {
    parse_train_config(kTiny, "layout.toml", overrides);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void expect_error(std::vector<std::string> overrides, std::initializer_list<const char*> parts) {
  const std::string e = error_of(overrides);
  ASSERT_FALSE(e.empty()) << "accepted: " << overrides[0];
  for (const char* p : parts) EXPECT_NE(e.find(p), std::string::npos) << e;
}

}  // namespace

TEST(ParallelLayout, ValidLayoutsParse) {
  auto c = parse_train_config(kTiny, "t.toml", {"parallel.tensor_parallel=2", "parallel.zero_stage=3"});
  EXPECT_EQ(c.tensor_parallel, 2);
  EXPECT_EQ(c.zero_stage, 3);
  auto l = parallel_layout(c, 8);
  EXPECT_EQ(l.dp, 4);
  EXPECT_EQ(l.tp, 2);
  EXPECT_EQ(l.pp, 1);
  EXPECT_EQ(aiscale::train::describe(l), "dp 4 x tp 2 x pp 1");
}

// The heads split whole; the vocabulary in padded slices, so any tensor_parallel fits it
// (on CPU ranks as on GPUs).
TEST(ParallelLayout, TensorParallelMustDivideTheHeadsNotTheVocabulary) {
  expect_error({"parallel.tensor_parallel=4"}, {"model.n_head = 2", "parallel.tensor_parallel = 4"});
  auto c = parse_train_config(kTiny, "t.toml", {"model.vocab_size=255", "parallel.tensor_parallel=2"});
  EXPECT_EQ(parallel_layout(c, 2).tp, 2);
}

TEST(ParallelLayout, PipelineAndMicrobatches) {
  expect_error({"parallel.pipeline_parallel=3"}, {"model.n_layer = 2", "at most 2 stages"});
  expect_error({"parallel.pipeline_parallel=2", "parallel.microbatches=3"},
               {"does not divide train.batch_size = 4"});
  expect_error({"parallel.pipeline_parallel=2", "parallel.microbatches=1"},
               {"1f1b", "microbatches >= parallel.pipeline_parallel", "gpipe"});
  expect_error({"parallel.microbatches=2"}, {"parallel.pipeline_parallel = 1", "train.grad_accum"});
  expect_error({"parallel.pipeline_schedule=zigzag"}, {"gpipe, 1f1b"});
}

TEST(ParallelLayout, SequenceParallelNeedsTensorRanks) {
  expect_error({"parallel.sequence_parallel=true"}, {"parallel.tensor_parallel = 1"});
  expect_error({"parallel.tensor_parallel=2", "parallel.sequence_parallel=true", "train.batch_size=1",
                "train.seq_len=3"},
               {"3 tokens", "does not divide"});
}

TEST(ParallelLayout, ZeroStageCombinations) {
  expect_error({"parallel.zero_stage=3", "parallel.pipeline_parallel=2", "parallel.microbatches=2"},
               {"parallel.zero_stage = 3", "pipeline_parallel > 1"});
  expect_error({"parallel.zero_stage=4"}, {"parallel.zero_stage"});
  // GPU ranks run every stage with plain data parallelism: ZeRO-2 passes the layout check.
  auto z2 = parse_train_config(kTiny, "t.toml", {"parallel.zero_stage=2", "train.device=cuda"});
  EXPECT_EQ(parallel_layout(z2, 4).dp, 4);
}

// GPU ranks run tensor parallelism with data-parallel copies of the tensor group
// (world = dp x tp), with ZeRO 0 to 3, also inside pipeline stages (ZeRO 0 or 1 there) and
// with sequence parallelism, the vocabulary split in padded slices.
TEST(ParallelLayout, GpuTensorParallelismRunsWithDataParallelCopies) {
  auto c = parse_train_config(kTiny, "t.toml", {"parallel.tensor_parallel=2", "train.device=cuda",
                                                "model.vocab_size=255"});
  auto l = parallel_layout(c, 2);
  EXPECT_EQ(l.tp, 2);
  EXPECT_EQ(l.dp, 1);
  l = parallel_layout(c, 4);
  EXPECT_EQ(l.tp, 2);
  EXPECT_EQ(l.dp, 2);
  EXPECT_EQ(aiscale::train::describe(l), "dp 2 x tp 2 x pp 1");
  try {
    parallel_layout(c, 5);
    FAIL() << "5 ranks accepted for tp = 2 on GPU ranks";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("5 rank(s)"), std::string::npos) << m;
    EXPECT_NE(m.find("multiple of 2"), std::string::npos) << m;
  }
  // ZeRO-1 shards the optimizer state over each data group, ZeRO-2/3 each tensor rank's
  // slices too (also with sequence parallelism); not with the optimizer state on the host
  // (refused with the fix).
  for (const char* stage : {"parallel.zero_stage=1", "parallel.zero_stage=2",
                            "parallel.zero_stage=3"}) {
    for (const char* sp : {"parallel.sequence_parallel=false", "parallel.sequence_parallel=true"}) {
      auto z = parse_train_config(kTiny, "t.toml", {"parallel.tensor_parallel=2", "train.device=cuda",
                                                    stage, sp});
      EXPECT_EQ(parallel_layout(z, 4).dp, 2) << stage << " " << sp;
    }
  }
  expect_error({"parallel.tensor_parallel=2", "train.device=cuda", "parallel.zero_stage=3",
                "parallel.offload_optimizer=true"},
               {"parallel.offload_optimizer = false", "parallel.tensor_parallel = 1"});
  // CPU ranks: ZeRO-1 is the trainer's wrapper around plain data parallelism; with tensor
  // parallelism the fix is ZeRO-2.
  expect_error({"parallel.tensor_parallel=2", "parallel.zero_stage=1"},
               {"parallel.zero_stage = 1", "parallel.zero_stage = 2"});
  EXPECT_EQ(parallel_layout(parse_train_config(kTiny, "t.toml", {"parallel.zero_stage=1"}), 2).dp, 2);
  // Sequence parallelism runs with GPU tensor parallelism (dp x tp), also inside stages.
  auto sp = parse_train_config(kTiny, "t.toml", {"parallel.tensor_parallel=2", "train.device=cuda",
                                                 "parallel.sequence_parallel=true"});
  EXPECT_EQ(parallel_layout(sp, 4).dp, 2);
  auto sp_pp = parse_train_config(kTiny, "t.toml", {"parallel.tensor_parallel=2", "train.device=cuda",
                                                    "parallel.sequence_parallel=true",
                                                    "parallel.pipeline_parallel=2",
                                                    "parallel.microbatches=2"});
  EXPECT_EQ(aiscale::train::describe(parallel_layout(sp_pp, 4)), "dp 1 x tp 2 x pp 2");
  expect_error({"parallel.tensor_parallel=4", "train.device=cuda"}, {"model.n_head = 2"});
}

// GPU ranks run pipeline stages with data-parallel copies of the pipeline (world = dp x pp),
// ZeRO 0 or 1, fp32 gradients over NCCL, also with tensor parallelism inside the stages.
TEST(ParallelLayout, GpuPipelineStagesRunWithDataParallelCopies) {
  auto c = parse_train_config(kTiny, "t.toml", {"parallel.pipeline_parallel=2", "train.device=cuda",
                                                "parallel.microbatches=2"});
  EXPECT_EQ(parallel_layout(c, 2).pp, 2);
  EXPECT_EQ(parallel_layout(c, 2).dp, 1);
  EXPECT_EQ(aiscale::train::describe(parallel_layout(c, 4)), "dp 2 x tp 1 x pp 2");
  const std::vector<std::string> pp2 = {"parallel.pipeline_parallel=2", "train.device=cuda",
                                        "parallel.microbatches=2"};
  auto with = [&](std::string key) {
    auto keys = pp2;
    keys.push_back(std::move(key));
    return keys;
  };
  auto tp = parse_train_config(kTiny, "t.toml", with("parallel.tensor_parallel=2"));
  EXPECT_EQ(aiscale::train::describe(parallel_layout(tp, 8)), "dp 2 x tp 2 x pp 2");
  auto z1 = parse_train_config(kTiny, "t.toml", with("parallel.zero_stage=1"));
  EXPECT_EQ(aiscale::train::describe(parallel_layout(z1, 4)), "dp 2 x tp 1 x pp 2");
  expect_error(with("parallel.grad_comm=bf16"), {"parallel.grad_comm = \"fp32\""});
  expect_error(with("parallel.grad_transport=copy-engine"), {"parallel.grad_transport = \"nccl\""});
  expect_error(with("parallel.zero_stage=2"), {"ZeRO 0 or 1", "parallel.zero_stage = 1"});
  expect_error(with("parallel.zero_stage=3"), {"parallel.zero_stage = 3", "pipeline_parallel > 1"});
  // ZeRO-2 beside tensor parallelism runs without stages only.
  expect_error({"parallel.pipeline_parallel=2", "train.device=cuda", "parallel.microbatches=2",
                "parallel.tensor_parallel=2", "parallel.zero_stage=2"},
               {"ZeRO 0 or 1", "parallel.pipeline_parallel = 1"});
}

// The ranks' places (train::grid_options, shared by aiscale train and bench language):
// tensor ranks consecutive, the data-parallel copies outside them, as on CPU ranks.
TEST(ParallelLayout, TensorRanksAreConsecutiveAndDataGroupsCrossThem) {
  using aiscale::parallel::Axis;
  using aiscale::parallel::ProcessGrid;
  aiscale::train::ParallelLayout l;
  l.dp = 2;
  l.tp = 2;
  const ProcessGrid g(aiscale::train::grid_options(l));
  EXPECT_EQ(g.world(), 4);
  EXPECT_EQ(g.groups(Axis::tp), (std::vector<std::vector<int>>{{0, 1}, {2, 3}}));
  EXPECT_EQ(g.groups(Axis::dp), (std::vector<std::vector<int>>{{0, 2}, {1, 3}}));
  EXPECT_EQ(g.coord(3).dp, 1);
  EXPECT_EQ(g.coord(3).tp, 1);
  EXPECT_EQ(g.coord(2).tp, 0);
  // Larger: dp 3 x tp 4 x pp 2, pipeline stages outermost.
  l.dp = 3;
  l.tp = 4;
  l.pp = 2;
  const ProcessGrid big(aiscale::train::grid_options(l));
  EXPECT_EQ(big.world(), 24);
  EXPECT_EQ(big.group(Axis::tp, 5), (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(big.group(Axis::dp, 5), (std::vector<int>{1, 5, 9}));
  EXPECT_EQ(big.group(Axis::pp, 5), (std::vector<int>{5, 17}));
}

TEST(ParallelLayout, RankCountMustBeAMultipleOfTheModelRanks) {
  auto c = parse_train_config(kTiny, "t.toml", {"parallel.tensor_parallel=2"});
  try {
    parallel_layout(c, 3);
    FAIL() << "3 ranks accepted for tp = 2";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("3 rank(s)"), std::string::npos) << m;
    EXPECT_NE(m.find("multiple of 2"), std::string::npos) << m;
  }
}
