// The copy-engine exchange's staging ring: regions in order, wrap-around, and which
// earlier call a sender must wait for before it overwrites a peer's staged bytes.
#include <gtest/gtest.h>

#include <stdexcept>

#include "aiscale/parallel/cuda/staging_ring.h"

using aiscale::parallel::StagingRing;

TEST(StagingRing, RegionsFollowEachOtherUntilTheEnd) {
  StagingRing r(1000);
  auto a = r.take(300, 1), b = r.take(300, 2), c = r.take(400, 3);
  EXPECT_EQ(a.offset, 0u);
  EXPECT_EQ(b.offset, 300u);
  EXPECT_EQ(c.offset, 600u);
  EXPECT_EQ(a.reuse_wait + b.reuse_wait + c.reuse_wait, 0u);  // fresh bytes: nothing to await
}

TEST(StagingRing, WrapsAndWaitsForTheLatestCallItOverwrites) {
  StagingRing r(1000);
  r.take(400, 1);                // [0, 400)
  r.take(400, 2);                // [400, 800)
  auto c = r.take(300, 3);       // does not fit before 1000: wraps to [0, 300)
  EXPECT_EQ(c.offset, 0u);
  EXPECT_EQ(c.reuse_wait, 1u);   // overlaps take 1 only
  auto d = r.take(300, 4);       // [300, 600): the tail of take 1 and the head of take 2
  EXPECT_EQ(d.offset, 300u);
  EXPECT_EQ(d.reuse_wait, 2u);   // the latest of them
  auto e = r.take(400, 5);       // [600, 1000): the rest of take 2
  EXPECT_EQ(e.offset, 600u);
  EXPECT_EQ(e.reuse_wait, 2u);
  auto f = r.take(1000, 6);      // everything: takes 3, 4, 5 were there
  EXPECT_EQ(f.offset, 0u);
  EXPECT_EQ(f.reuse_wait, 5u);
  EXPECT_EQ(r.live_regions(), 1u);  // wholly overwritten regions are forgotten
}

// A long run of equal calls (a training step's buckets, step after step) keeps a bounded
// set of live regions, and every reuse waits for exactly the call that last used the bytes.
TEST(StagingRing, SteadyStateOfEqualCalls) {
  StagingRing r(1000);
  for (uint32_t call = 1; call <= 1000; ++call) {
    auto t = r.take(250, call);
    EXPECT_EQ(t.offset, size_t((call - 1) % 4) * 250);
    EXPECT_EQ(t.reuse_wait, call > 4 ? call - 4 : 0u);
    EXPECT_LE(r.live_regions(), 4u);
  }
}

TEST(StagingRing, RefusesMoreThanItHolds) {
  StagingRing r(100);
  EXPECT_THROW(r.take(101, 1), std::invalid_argument);
}
