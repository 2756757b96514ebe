// CPU partitions: node peaks from cores × clock × FLOPs per cycle, planning across nodes,
// and the explanations when a CPU partition cannot be planned.
#include <gtest/gtest.h>

#include "aiscale/core/error.h"
#include "aiscale/plan/planner.h"

namespace aiscale::plan {
namespace {

const Catalog& catalog() {
  static const Catalog cat = load_catalog(std::string(AISCALE_SOURCE_DIR) + "/data/systems");
  return cat;
}

PlanRequest cpu_request() {
  PlanRequest r;
  r.workload = make_workload("gpt2-124m");
  r.tokens = 1e8;
  r.precision = Precision::fp32;  // aiscale's CPU backend trains in fp32
  return r;
}

TEST(PlanCpu, NodePeaksFromCoresClockAndFlopsPerCycle) {
  const auto lumi_c = catalog().resolve("lumi/lumi-c");
  ASSERT_EQ(lumi_c.size(), 1u);
  const Accelerator& node = lumi_c[0].partition->accelerator;
  EXPECT_TRUE(node.cpu_node);
  EXPECT_TRUE(lumi_c[0].partition->plannable());
  EXPECT_EQ(lumi_c[0].partition->gpus_per_node, 1);  // one rank per node
  // 2 sockets × 64 cores × 2.45 GHz × 32 FP32 FLOPs per cycle (Zen 3: 2 × 256-bit FMA).
  EXPECT_DOUBLE_EQ(node.peak_flops(Precision::fp32), 2 * 64 * 2.45e9 * 32);
  EXPECT_DOUBLE_EQ(node.peak_flops(Precision::bf16), 0.0);
  EXPECT_DOUBLE_EQ(node.memory_gib, 256.0);
  EXPECT_DOUBLE_EQ(node.memory_bandwidth_tbs, 2 * 204.8 / 1000);
  // Karolina's CPU partition runs ~20% below the 2.6 GHz datasheet clock.
  const Accelerator& karolina = catalog().resolve("karolina/cpu")[0].partition->accelerator;
  EXPECT_DOUBLE_EQ(karolina.peak_flops(Precision::fp32), 2 * 64 * 2.08e9 * 32);
  // Sapphire Rapids: 2 × 512-bit FMA = 64 FP32 FLOPs per cycle, 56 cores at 2.0 GHz.
  const Accelerator& gpp = catalog().resolve("marenostrum5/gpp")[0].partition->accelerator;
  EXPECT_DOUBLE_EQ(gpp.peak_flops(Precision::fp32), 2 * 56 * 2.0e9 * 64);
}

TEST(PlanCpu, CpuPartitionsAreNotPlannedUnlessNamed) {
  for (const auto& t : catalog().gpu_targets()) EXPECT_TRUE(t.partition->is_gpu()) << t.label();
  for (const auto& t : catalog().resolve("leonardo")) EXPECT_TRUE(t.partition->is_gpu()) << t.label();
  EXPECT_EQ(catalog().resolve("lumi-c").size(), 1u);  // a unique partition id names it
}

TEST(PlanCpu, RankedCpuLayoutAcrossNodes) {
  const PlanRequest r = cpu_request();
  const Assumptions a;
  const PlanResult res = plan(r, catalog().resolve("marenostrum5/gpp"), catalog(), Calibration{}, a);
  ASSERT_EQ(res.ranked.size(), 1u) << (res.rejected.empty() ? "" : res.rejected[0].reason);
  const Candidate& c = res.ranked[0];
  EXPECT_GT(c.step.nodes, 1);  // the network lets it scale out
  EXPECT_EQ(c.layout.tp, 1);
  EXPECT_GE(c.efficiency, r.min_efficiency);
  EXPECT_EQ(c.attention, Attention::materialized);  // aiscale's CPU backend stores the scores
  EXPECT_EQ(c.route.name, "CPU allocation");
  EXPECT_DOUBLE_EQ(c.figures.utilisation.value, a.cpu_utilisation);
  EXPECT_FALSE(c.figures.utilisation.measured);
  // One node's compute time by hand: FLOPs per step / nodes / (peak × utilisation).
  const double per_token = 6.0 * 124439808 + 12.0 * 12 * 768 * 1024;
  const double node_rate = 2 * 56 * 2.0e9 * 64 * a.cpu_utilisation;
  EXPECT_NEAR(c.step.compute_s, per_token * 512 * 1024 / c.layout.dp / node_rate, 1e-9);

  // One node of LUMI-C (its network is not in the catalogue).
  const PlanResult one = plan(r, catalog().resolve("lumi/lumi-c"), catalog(), Calibration{}, a);
  ASSERT_EQ(one.ranked.size(), 1u);
  EXPECT_EQ(one.ranked[0].step.nodes, 1);
}

TEST(PlanCpu, WrongInputOnCpuPartitionsIsExplained) {
  PlanRequest r = cpu_request();
  r.precision = Precision::bf16;
  PlanResult res = plan(r, catalog().resolve("lumi/lumi-c"), catalog(), Calibration{}, Assumptions{});
  ASSERT_EQ(res.rejected.size(), 1u);
  EXPECT_NE(res.rejected[0].reason.find("--precision fp32"), std::string::npos) << res.rejected[0].reason;
  // A CPU partition whose CPU model is not in the catalogue.
  r.precision = Precision::fp32;
  res = plan(r, catalog().resolve("vega/cpu"), catalog(), Calibration{}, Assumptions{});
  ASSERT_EQ(res.rejected.size(), 1u);
  EXPECT_NE(res.rejected[0].reason.find("cpu_model"), std::string::npos) << res.rejected[0].reason;
  // A model too large for one node's RAM and no network to spread it: no fit, with a reason.
  r.workload = make_workload("gpt3-175b");
  res = plan(r, catalog().resolve("lumi/lumi-c"), catalog(), Calibration{}, Assumptions{});
  ASSERT_EQ(res.rejected.size(), 1u);
  EXPECT_NE(res.rejected[0].reason.find("does not fit in memory"), std::string::npos)
      << res.rejected[0].reason;
}

}  // namespace
}  // namespace aiscale::plan
