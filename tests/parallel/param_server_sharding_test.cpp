// The arithmetic of parameter-server training: roles, shards, schedule steps, staleness.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <utility>

#include "aiscale/core/error.h"
#include "aiscale/parallel/param_server/sharding.h"

namespace ps = aiscale::parallel::param_server;

TEST(ParamServerSharding, ShardsCoverTheVectorContiguouslyAndBalanced) {
  for (int64_t n : {0, 1, 7, 100, 1001}) {
    for (int servers : {1, 2, 3, 5, 8}) {
      int64_t next = 0, smallest = n, largest = 0;
      for (int s = 0; s < servers; ++s) {
        const ps::ShardRange r = ps::shard_range(n, servers, s);
        EXPECT_EQ(r.begin, next) << n << " over " << servers << ", shard " << s;
        next = r.end;
        smallest = std::min(smallest, r.size());
        largest = std::max(largest, r.size());
      }
      EXPECT_EQ(next, n) << n << " over " << servers;
      EXPECT_LE(largest - smallest, 1) << n << " over " << servers;
    }
  }
  // The first n % servers shards hold the extra value.
  EXPECT_EQ(ps::shard_range(10, 3, 0).size(), 4);
  EXPECT_EQ(ps::shard_range(10, 3, 1).begin, 4);
  EXPECT_EQ(ps::shard_range(10, 3, 2).begin, 7);
  // More servers than values: the last ones hold nothing.
  EXPECT_EQ(ps::shard_range(2, 3, 2).size(), 0);
}

TEST(ParamServerSharding, TheLastRanksServe) {
  const ps::Roles r = ps::make_roles(5, 2);
  EXPECT_EQ(r.workers(), 3);
  EXPECT_FALSE(r.is_server(2));
  EXPECT_TRUE(r.is_server(3));
  EXPECT_EQ(r.server_index(4), 1);
  EXPECT_EQ(r.server_rank(0), 3);
}

TEST(ParamServerSharding, NoWorkerLeftIsAClearError) {
  for (auto [world, servers] : {std::pair{3, 3}, std::pair{2, 5}, std::pair{1, 1}}) {
    try {
      ps::make_roles(world, servers);
      FAIL() << servers << " servers of " << world << " ranks accepted";
    } catch (const aiscale::Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("parallel.parameter_servers"), std::string::npos) << m;
      EXPECT_NE(m.find("leaves no worker"), std::string::npos) << m;
      EXPECT_NE(m.find("-n " + std::to_string(servers + 1)), std::string::npos) << m;
    }
  }
  EXPECT_THROW(ps::make_roles(4, 0), aiscale::Error);
}

TEST(ParamServerSharding, EveryWorkersUpdatesAdvanceTheScheduleOneStep) {
  // 3 workers x 4 steps = 12 updates over schedule steps 0..3.
  EXPECT_EQ(ps::schedule_step(0, 3, 4), 0);
  EXPECT_EQ(ps::schedule_step(2, 3, 4), 0);
  EXPECT_EQ(ps::schedule_step(3, 3, 4), 1);
  EXPECT_EQ(ps::schedule_step(11, 3, 4), 3);
  EXPECT_EQ(ps::schedule_step(40, 3, 4), 3);  // clamped to the last step
}

TEST(ParamServerSharding, StalenessStatisticsAndTheBound) {
  ps::StalenessStats a, b;
  a.add_applied(0);
  a.add_applied(3);
  b.add_applied(1);
  b.add_discarded();
  a.merge(b);
  EXPECT_EQ(a.updates, 3);
  EXPECT_EQ(a.discarded, 1);
  EXPECT_EQ(a.max, 3);
  EXPECT_DOUBLE_EQ(a.mean(), 4.0 / 3.0);
  EXPECT_DOUBLE_EQ(ps::StalenessStats{}.mean(), 0.0);
  EXPECT_TRUE(ps::within_bound(100, 0));  // 0: unbounded
  EXPECT_TRUE(ps::within_bound(2, 2));
  EXPECT_FALSE(ps::within_bound(3, 2));
}
