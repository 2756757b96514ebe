// GPT-3 175B's byte arithmetic on 1024 GPUs, nothing allocated: what one rank of a ZeRO-3
// or tp x pp layout holds (train/rank_buffers.h, from the engine's layouts), the streamed
// checkpoint's ranges and staging, and the per-buffer bound of configuration checks.
#include <gtest/gtest.h>

#include "aiscale/core/error.h"
#include "aiscale/core/validate.h"
#include "aiscale/nn/models/gpt.h"
#include "aiscale/train/checkpoint_stream.h"
#include "aiscale/train/hf_mapping.h"
#include "aiscale/train/parallel_layout.h"
#include "aiscale/train/rank_buffers.h"

using namespace aiscale;
using namespace aiscale::train;

namespace {

TrainConfig gpt3(int zero, int tp, int pp) {
  TrainConfig c;
  c.model = nn::gpt_preset("gpt3-175b");
  c.device = "cuda";
  c.precision = "bf16";
  c.zero_stage = zero;
  c.tensor_parallel = tp;
  c.pipeline_parallel = pp;
  return c;
}

uint64_t total(const std::vector<RankBuffer>& b) {
  uint64_t t = 0;
  for (const auto& x : b) t += x.bytes;
  return t;
}

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

}  // namespace

TEST(Gpt3RankBuffers, ZeroThreeOver1024Ranks) {
  const TrainConfig c = gpt3(3, 1, 1);
  const int64_t n = c.model.num_params();
  EXPECT_NEAR(double(n), 174.6e9, 0.1e9);
  // The whole model's parameters, gradients and moments: far beyond one buffer.
  EXPECT_GT(uint64_t(n) * 16, validate::kMaxBufferBytes);
  const ParallelLayout l = parallel_layout(c, 1024);  // checks every buffer: accepted
  EXPECT_EQ(l.dp, 1024);
  const auto buffers = rank_state_buffers(c, l);
  ASSERT_EQ(buffers.size(), 1u);  // one device allocation
  // 16 bytes per parameter over 1024 ranks (master, m, v, gradients), the bf16 working
  // shard, and the gathered embeddings and two layers (bf16).
  const double shard = double(n) / 1024;
  const double gathered = 2.0 * (50257.0 * 12288 + 2048.0 * 12288 + 2 * 12.0 * 12288 * 12288);
  EXPECT_NEAR(double(buffers[0].bytes), 18 * shard + gathered, 0.02 * (18 * shard + gathered));
  EXPECT_LT(buffers[0].bytes / kGiB, 12.0);  // of an H100's 80 GB
  // Checkpoints stream: 2 ranges of 64 MiB, not 12 bytes x 175e9 = 1.9 TiB.
  EXPECT_EQ(checkpoint_staging_bytes(c, l), uint64_t(2) << 26);
}

TEST(Gpt3RankBuffers, TensorTimesPipelineOver1024Ranks) {
  const TrainConfig c = gpt3(1, 8, 16);
  const ParallelLayout l = parallel_layout(c, 1024);
  EXPECT_EQ(l.dp, 8);
  const auto buffers = rank_state_buffers(c, l);
  // A stage's 6 layers sliced 8 ways plus the embeddings' vocabulary slice: ~1.4e9 values,
  // master and moments over dp 8.
  // (The vocabulary slice is 50257 / 8 rows rounded up to the GPU's 128: 6400.)
  const double local = 6 * 12.0 * 12288 * 12288 / 8 + 6400.0 * 12288 + 2048.0 * 12288;
  const double expect = local * (12.0 / 8 + 4 + 2);
  EXPECT_NEAR(double(total(buffers)), expect, 0.05 * expect);
  EXPECT_EQ(checkpoint_staging_bytes(c, l), uint64_t(2) << 26);
}

// GPU ranks stream in every layout, one GPU and plain data parallelism too; CPU ranks that
// hold the whole state (DDP) snapshot its three vectors.
TEST(Gpt3RankBuffers, GpuRanksStreamInEveryLayout) {
  TrainConfig c = gpt3(0, 1, 1);
  c.model = nn::gpt_preset("gpt2-6.6b");
  ParallelLayout l;
  l.dp = 8;
  EXPECT_EQ(checkpoint_staging_bytes(c, l), uint64_t(2) << 26);
  l.dp = 1;
  EXPECT_EQ(checkpoint_staging_bytes(c, l), uint64_t(2) << 26);
  c.device = "cpu";
  EXPECT_EQ(checkpoint_staging_bytes(c, l), uint64_t(c.model.num_params()) * 12);
}

// The checkpoint's ranges of the full model: at most 64 MiB each, rows whole, tiling it.
TEST(Gpt3RankBuffers, CheckpointRangesAreBounded) {
  const nn::GptConfig m = nn::gpt_preset("gpt3-175b");
  const auto ranges = hf_chunks(hf_model_map(m), kCheckpointChunkBytes / 4);
  int64_t at = 0, largest = 0;
  for (const auto& [b, e] : ranges) {
    EXPECT_EQ(b, at);
    largest = std::max(largest, e - b);
    at = e;
  }
  EXPECT_EQ(at, m.num_params());
  EXPECT_LE(largest * 4, kCheckpointChunkBytes);
  EXPECT_GT(ranges.size(), size_t(10000));  // 698 GB in ranges of <= 64 MiB
}

// One GPU holding all of 175B would be one device allocation of ~2.8 TiB: refused, naming
// the layout and the keys that shrink it; a CPU rank's buffers are bounded one by one.
TEST(Gpt3RankBuffers, ALayoutWithABufferBeyond2To40IsRefused) {
  const TrainConfig c = gpt3(0, 1, 1);
  try {
    parallel_layout(c, 1);
    FAIL() << "accepted";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("dp 1 x tp 1 x pp 1"), std::string::npos) << what;
    EXPECT_NE(what.find("parallel.zero_stage"), std::string::npos) << what;
    EXPECT_NE(what.find("device allocation"), std::string::npos) << what;
  }
  TrainConfig z = gpt3(3, 1, 1);
  EXPECT_THROW(parallel_layout(z, 1), Error);   // ZeRO-3 over one rank shards nothing
  EXPECT_NO_THROW(parallel_layout(z, 8));       // over 8: 350 GiB per GPU, under 2^40
  // ZeRO-1 shards only the optimizer: the fp32 gradients and working copy stay whole.
  TrainConfig fp32 = gpt3(1, 1, 1);
  fp32.precision = "fp32";
  EXPECT_THROW(parallel_layout(fp32, 1024), Error);
}
