// ZeRO shards of a flat buffer cut into units, against a communicator of two ranks whose
// other rank holds the same values as this one (rank 0): padding, owned ranges, the
// reduce-scatter of a unit's gradient and the gather of its parameters, with and without
// the prefetch that starts a gather early.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "aiscale/optim/zero_shards.h"

using aiscale::optim::ZeroShards;

namespace {

class TwinRanks final : public aiscale::parallel::Communicator {
 public:
  int rank() const override { return 0; }
  int world() const override { return 2; }
  std::string backend() const override { return "twin"; }
  void allreduce_sum(float* d, int64_t n) override { for (int64_t i = 0; i < n; ++i) d[i] *= 2; }
  void allreduce_sum(double* d, int64_t n) override { for (int64_t i = 0; i < n; ++i) d[i] *= 2; }
  void broadcast(float*, int64_t, int) override {}
  void broadcast_bytes(void*, int64_t, int) override {}
  void barrier() override {}
  void abort(int) override {}
  void allgather(const float* in, float* out, int64_t c) override {
    std::copy(in, in + c, out);
    std::copy(in, in + c, out + c);
  }
  void allgather_async(const float* in, float* out, int64_t c) override {
    ++started;
    allgather(in, out, c);
  }
  void reduce_scatter_sum(const float* in, float* out, int64_t c) override {
    for (int64_t i = 0; i < c; ++i) out[i] = 2 * in[i];  // both ranks' part 0
  }
  void wait() override { ++waits; }
  int started = 0, waits = 0;
};

}  // namespace

TEST(ZeroShards, UnitsSplitIntoPaddedShards) {
  TwinRanks twin;
  ZeroShards z({0, 5, 12}, &twin);  // units of 5 and 7 values
  EXPECT_EQ(z.shard(0), 3);
  EXPECT_EQ(z.shard(1), 4);
  EXPECT_EQ(z.shards_size(), 7);
  EXPECT_EQ(z.shard_offset(1), 3);
  EXPECT_EQ(z.owned_begin(0), 0);
  EXPECT_EQ(z.owned_end(0), 3);
  EXPECT_EQ(z.owned_begin(1), 5);
  EXPECT_EQ(z.owned_end(1), 9);
  EXPECT_EQ(z.shard_index(1, 6), 4);
  ZeroShards one({0, 5, 12}, nullptr);  // one rank: a shard is its unit
  EXPECT_EQ(one.shards_size(), 12);
  EXPECT_EQ(one.owned_end(1), 12);
}

TEST(ZeroShards, ReduceScatterAddsThisRanksPartOfTheSum) {
  TwinRanks twin;
  ZeroShards z({0, 5, 12}, &twin);
  std::vector<float> unit(7);
  std::iota(unit.begin(), unit.end(), 1.0f);
  std::vector<float> mine(4, 10.0f);
  z.reduce_scatter_add(1, unit.data(), mine.data());
  EXPECT_EQ(mine, (std::vector<float>{12, 14, 16, 18}));
}

TEST(ZeroShards, GatherAndPrefetchGiveTheSameUnit) {
  TwinRanks twin;
  ZeroShards z({0, 5, 12}, &twin);
  const std::vector<float> mine = {1, 2, 3, 4};
  std::vector<float> direct(7), prefetched(7);
  z.gather(1, mine.data(), direct.data());
  // The twin's shard equals ours: the unit is ours then the first 3 of the twin's.
  EXPECT_EQ(direct, (std::vector<float>{1, 2, 3, 4, 1, 2, 3}));
  z.prefetch(1, mine.data());
  EXPECT_EQ(twin.started, 1);
  z.gather(1, mine.data(), prefetched.data());
  EXPECT_EQ(twin.waits, 1);  // completed the prefetch rather than gathering again
  EXPECT_EQ(prefetched, direct);
  // A prefetch of another unit is completed and the asked unit gathered.
  z.prefetch(0, mine.data());
  z.gather(1, mine.data(), prefetched.data());
  EXPECT_EQ(prefetched, direct);
}
