// The data-parallel bucket planner, hand-checked on gpt-tiny (L=2, C=64, T=64, V=256,
// 120,576 parameters; layer 0 at 20,480, layer 1 at 70,464, ln_f at 120,448; inside a
// layer the QKV weight starts at 128 and the attention projection's bias at 16,704).
#include <gtest/gtest.h>

#include "aiscale/core/error.h"
#include "aiscale/nn/models/gpt.h"
#include "aiscale/nn/models/gpt_layout.h"
#include "aiscale/parallel/data_parallel/bucket_plan.h"

namespace aiscale::parallel::dp {
namespace {

struct Expected {
  int64_t begin, end;
  int point;
};

void expect_buckets(const BucketPlan& plan, const std::vector<Expected>& want) {
  ASSERT_EQ(plan.buckets.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(plan.buckets[i].begin, want[i].begin) << "bucket " << i;
    EXPECT_EQ(plan.buckets[i].end, want[i].end) << "bucket " << i;
    EXPECT_EQ(plan.buckets[i].point, want[i].point) << "bucket " << i;
  }
}

GradientOrder tiny_order() { return nn::gpt_gradient_order(nn::GptLayout(nn::gpt_preset("gpt-tiny"))); }
constexpr int64_t kTiny = 120576;

TEST(BucketPlan, SmallBucketsGiveEveryLayerItsOwnAndCutLayerZeroInThree) {
  BucketPlanOptions o;
  o.bucket_values = 1;
  o.world = 2;
  const BucketPlan plan = plan_buckets(tiny_order(), kTiny, o);
  expect_buckets(plan, {{0, 20480, nn::kGptAfterLmHead},
                        {70464, 120576, 1},
                        {37184, 70464, nn::kGptLayer0Mlp},
                        {20608, 37184, nn::kGptLayer0Qkv},
                        {20480, 20608, 0}});
  EXPECT_EQ(plan.padded_size, kTiny);
  EXPECT_EQ(plan.shard_size, kTiny);
  for (const Bucket& b : plan.buckets) EXPECT_EQ(b.part, b.size());
}

TEST(BucketPlan, LargeBucketsMergeLayersUntilLayerZerosCuts) {
  BucketPlanOptions o;
  o.bucket_values = bucket_values_for_mib(25);  // 6,553,600 values: more than the model
  EXPECT_EQ(o.bucket_values, 6553600);
  const BucketPlan plan = plan_buckets(tiny_order(), kTiny, o);
  // Layer 1 (with ln_f) stays open and joins layer 0's MLP part, which must cut.
  expect_buckets(plan, {{0, 20480, nn::kGptAfterLmHead},
                        {37184, 120576, nn::kGptLayer0Mlp},
                        {20608, 37184, nn::kGptLayer0Qkv},
                        {20480, 20608, 0}});
}

TEST(BucketPlan, ZeroOneRoundsBoundariesToTheWorldSize) {
  BucketPlanOptions o;
  o.bucket_values = 1;
  o.world = 6;
  o.shard = true;
  const BucketPlan plan = plan_buckets(tiny_order(), kTiny, o);
  // Layer starts round down (20,480 -> 20,478; 70,464 is a multiple of 6), layer 0's inner
  // cuts round up (20,608 -> 20,610; 37,184 -> 37,188); 120,576 is a multiple of 6.
  expect_buckets(plan, {{0, 20478, nn::kGptAfterLmHead},
                        {70464, 120576, 1},
                        {37188, 70464, nn::kGptLayer0Mlp},
                        {20610, 37188, nn::kGptLayer0Qkv},
                        {20478, 20610, 0}});
  EXPECT_EQ(plan.padded_size, kTiny);
  EXPECT_EQ(plan.shard_size, kTiny / 6);
  const int64_t parts[] = {3413, 8352, 5546, 2763, 22};
  const int64_t offsets[] = {0, 3413, 11765, 17311, 20074};
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(plan.buckets[i].part, parts[i]) << i;
    EXPECT_EQ(plan.buckets[i].shard_offset, offsets[i]) << i;
    EXPECT_EQ(plan.buckets[i].part * 6, plan.buckets[i].size()) << i;
  }
}

TEST(BucketPlan, ZeroOnePadsTheBufferToTheWorldSize) {
  BucketPlanOptions o;
  o.bucket_values = 1;
  o.world = 7;
  o.shard = true;
  const BucketPlan plan = plan_buckets(tiny_order(), kTiny, o);
  EXPECT_EQ(plan.padded_size, 120582);  // 17,226 x 7
  EXPECT_EQ(plan.shard_size, 17226);
  // 20,480 -> 20,475; 70,464 -> 70,462; 20,608 and 37,184 are multiples of 7.
  expect_buckets(plan, {{0, 20475, nn::kGptAfterLmHead},
                        {70462, 120582, 1},
                        {37184, 70462, nn::kGptLayer0Mlp},
                        {20608, 37184, nn::kGptLayer0Qkv},
                        {20475, 20608, 0}});
  int64_t total = 0;
  for (const Bucket& b : plan.buckets) total += b.part;
  EXPECT_EQ(total, plan.shard_size);
}

TEST(BucketPlan, WithoutOverlapOneBucketAfterBackward) {
  BucketPlanOptions o;
  o.overlap = false;
  o.world = 4;
  o.shard = true;
  const BucketPlan plan = plan_buckets(tiny_order(), kTiny, o);
  expect_buckets(plan, {{0, kTiny, kAfterBackward}});
  EXPECT_EQ(plan.buckets[0].part, kTiny / 4);
}

// The plan ZeRO-1 makes for itself without a reducer (data-parallel copies of a tensor
// group, optim/zero1.cuh): one segment of a local buffer whose length the data group does
// not divide, one bucket padded to a multiple of it, equal parts.
TEST(BucketPlan, OneShardedSegmentIsPaddedToTheWorld) {
  BucketPlanOptions o;
  o.bucket_values = 1001;
  o.world = 4;
  o.shard = true;
  o.overlap = false;
  const BucketPlan plan = plan_buckets({GradientSegment{0, 1001, kAfterBackward}}, 1001, o);
  expect_buckets(plan, {{0, 1004, kAfterBackward}});
  EXPECT_EQ(plan.padded_size, 1004);
  EXPECT_EQ(plan.shard_size, 251);
  EXPECT_EQ(plan.buckets[0].part, 251);
  EXPECT_EQ(plan.buckets[0].shard_offset, 0);
}

TEST(BucketPlan, Gpt2SmallWithDefaultBucketsHasOneBucketPerLayer) {
  const nn::GptLayout L(nn::gpt_preset("gpt2-124m"));
  BucketPlanOptions o;
  o.bucket_values = bucket_values_for_mib(25);
  o.world = 2;
  const BucketPlan plan = plan_buckets(nn::gpt_gradient_order(L), L.size(), o);
  // A layer is 7,087,872 values (27 MiB): embeddings, layers 11..1, layer 0 in three.
  ASSERT_EQ(plan.buckets.size(), 1u + 11u + 3u);
  EXPECT_EQ(plan.buckets[0].end, L.embeddings_end());
  EXPECT_EQ(plan.buckets[1].begin, L.layer_begin(11));
  EXPECT_EQ(plan.buckets[1].end, L.size());
  EXPECT_EQ(plan.buckets[11].begin, L.layer_begin(1));
  EXPECT_EQ(plan.buckets[11].point, 1);
}

TEST(BucketPlan, SegmentsThatDoNotTileTheBufferAreRefused) {
  GradientOrder order = tiny_order();
  order.pop_back();
  EXPECT_THROW(plan_buckets(order, kTiny, BucketPlanOptions{}), Error);
  EXPECT_THROW(plan_buckets(tiny_order(), kTiny + 1, BucketPlanOptions{}), Error);
}

}  // namespace
}  // namespace aiscale::parallel::dp

namespace aiscale::parallel::dp {
namespace {

// The boundaries as the CUDA model computed them before the planner existed, written out
// over layer offsets: the planner must reproduce them for every size, world and bucket.
std::vector<Expected> layer_walk(const nn::GptLayout& L, int64_t target, int64_t q) {
  const auto down = [q](int64_t x) { return x / q * q; };
  const auto up = [q](int64_t x) { return (x + q - 1) / q * q; };
  const int64_t padded = up(L.size());
  std::vector<Expected> plan{{0, down(L.layer_begin(0)), nn::kGptAfterLmHead}};
  int64_t end = padded;
  for (int64_t l = L.config().n_layer - 1; l >= 0; --l) {
    const int64_t begin = down(L.layer_begin(l));
    if (l == 0) {
      const int64_t mlp = std::min(up(L.at(0, nn::GptBlockParam::proj_b)), end);
      const int64_t qkv = std::min(up(L.at(0, nn::GptBlockParam::qkv_w)), mlp);
      plan.push_back({mlp, end, nn::kGptLayer0Mlp});
      plan.push_back({qkv, mlp, nn::kGptLayer0Qkv});
      plan.push_back({begin, qkv, 0});
    } else if (end - begin >= target) {
      plan.push_back({begin, end, static_cast<int>(l)});
      end = begin;
    }
  }
  std::vector<Expected> nonempty;
  for (const Expected& e : plan)
    if (e.end > e.begin) nonempty.push_back(e);
  return nonempty;
}

TEST(BucketPlan, MatchesTheLayerWalkForEverySizeWorldAndBucket) {
  const nn::GptConfig configs[] = {nn::gpt_preset("gpt-tiny"), nn::gpt_preset("gpt-mini"),
                                   nn::gpt_preset("gpt2-124m"), {1, 2, 64, 64, 256},
                                   {3, 4, 128, 100, 1001}};
  for (const nn::GptConfig& c : configs) {
    const nn::GptLayout L(c);
    for (int world : {1, 2, 3, 4, 7, 8, 65})
      for (bool shard : {false, true})
        for (int64_t target : {int64_t(1), L.layer_size() / 2, L.layer_size() + 1,
                               3 * L.layer_size(), bucket_values_for_mib(25)}) {
          BucketPlanOptions o;
          o.bucket_values = target;
          o.world = world;
          o.shard = shard;
          SCOPED_TRACE("L=" + std::to_string(c.n_layer) + " C=" + std::to_string(c.n_embd) +
                       " world=" + std::to_string(world) + " shard=" + std::to_string(shard) +
                       " target=" + std::to_string(target));
          expect_buckets(plan_buckets(nn::gpt_gradient_order(L), L.size(), o),
                         layer_walk(L, target, shard ? world : 1));
        }
  }
}

}  // namespace
}  // namespace aiscale::parallel::dp
