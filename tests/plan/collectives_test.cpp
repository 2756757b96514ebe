// Alpha-beta collective costs and the topology factor.
#include <gtest/gtest.h>

#include "aiscale/plan/collectives.h"

namespace aiscale::plan {
namespace {

TEST(PlanCollectives, RingFormulas) {
  const Link link{1e-5, 1e10};  // 10 µs per step, 10 GB/s
  // 2(p-1)α + 2(p-1)/p · n/B with p = 4, n = 1 GB: 60 µs + 1.5 × 0.1 s.
  EXPECT_DOUBLE_EQ(ring_allreduce_time(1e9, 4, link), 6e-5 + 0.15);
  EXPECT_DOUBLE_EQ(ring_reduce_scatter_time(1e9, 4, link), 3e-5 + 0.075);
  EXPECT_DOUBLE_EQ(ring_allgather_time(1e9, 4, link), 3e-5 + 0.075);
  EXPECT_DOUBLE_EQ(ring_allreduce_time(1e9, 1, link), 0.0);
  // Latency is paid per call.
  EXPECT_DOUBLE_EQ(ring_allreduce_time(1e9, 4, link, 10), 6e-4 + 0.15);
  EXPECT_DOUBLE_EQ(p2p_time(1e9, link), 1e-5 + 0.1);
}

TEST(PlanCollectives, HierarchicalSplitsIntraAndInterNode) {
  Fabric f;
  f.intra = {0, 200e9};
  f.inter_per_gpu = {0, 10e9};
  // One node: only the intra-node ring.
  EXPECT_DOUBLE_EQ(hier_allreduce_time(1e9, {4, 1}, f), ring_allreduce_time(1e9, 4, f.intra));
  // 4 GPUs × 8 nodes: intra ring on 1 GB, then the inter-node ring on each GPU's 1/4.
  const double expected = ring_allreduce_time(1e9, 4, f.intra) + ring_allreduce_time(0.25e9, 8, f.inter_per_gpu);
  EXPECT_DOUBLE_EQ(hier_allreduce_time(1e9, {4, 8}, f), expected);
  EXPECT_DOUBLE_EQ(hier_reduce_scatter_time(1e9, {4, 8}, f) * 2, expected);
  // With fast intra links the inter-node term is 2(N-1)/N · n / (node bandwidth).
  const double node_bw = 4 * 10e9;
  EXPECT_NEAR(ring_allreduce_time(0.25e9, 8, f.inter_per_gpu), 2.0 * 7 / 8 * 1e9 / node_bw, 1e-12);
}

TEST(PlanCollectives, TopologyFactor) {
  TopologyAssumptions a;
  EXPECT_DOUBLE_EQ(topology_factor(Topology::fat_tree, 1000, 0, a), 1.0);
  EXPECT_DOUBLE_EQ(topology_factor(Topology::dragonfly, 16, 0, a), 1.0);  // within a group
  // Two groups of the default 128 nodes: half the traffic crosses, the assumed taper of 0.5
  // carries it, so only the share of the global links remains.
  EXPECT_DOUBLE_EQ(topology_factor(Topology::dragonfly, 256, 0, a), a.dragonfly_global);
  EXPECT_DOUBLE_EQ(topology_factor(Topology::dragonfly_plus, 256, 0, a), a.dragonfly_plus_global);
  // 1000 nodes are 8 groups: 7/8 of the traffic crosses, the taper carries 0.5 / 0.875.
  EXPECT_NEAR(topology_factor(Topology::dragonfly, 1000, 0, a), a.dragonfly_global * 0.5 / 0.875, 1e-12);
  EXPECT_NEAR(topology_factor(Topology::dragonfly_plus, 1000, 0, a), a.dragonfly_plus_global * 0.5 / 0.875,
              1e-12);
  // A catalogue taper replaces the assumption; a taper of 1 leaves the share alone.
  EXPECT_NEAR(topology_factor(Topology::dragonfly, 1000, 0, a, 0.25), a.dragonfly_global * 0.25 / 0.875, 1e-12);
  EXPECT_DOUBLE_EQ(topology_factor(Topology::dragonfly, 1000, 0, a, 1.0), a.dragonfly_global);
  EXPECT_DOUBLE_EQ(global_congestion(64, 32, 0.5), 1.0);           // 2 groups
  EXPECT_NEAR(global_congestion(128, 32, 0.5), 0.5 / 0.75, 1e-12);  // 4 groups
  EXPECT_GT(global_congestion(128, 32, 0.5), global_congestion(1024, 32, 0.5));
  EXPECT_DOUBLE_EQ(topology_factor(Topology::dragonfly_plus, 200, 256, a), 1.0);  // catalogue group
  EXPECT_DOUBLE_EQ(topology_factor(Topology::dragonfly, 1, 0, a), 1.0);
}

}  // namespace
}  // namespace aiscale::plan
