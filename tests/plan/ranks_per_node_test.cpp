// Fewer ranks per node on more nodes where a node's host memory holds fewer ranks than it
// has GPUs (planner.cpp fewer_ranks_per_node): the test partition's nodes have 4 H100s and
// 160 GiB, and a rank keeps 12 bytes per parameter there at a checkpoint.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "../support/run_support.h"
#include "aiscale/plan/planner.h"

namespace aiscale::plan {
namespace {

const std::string kFixture = std::string(AISCALE_SOURCE_DIR) + "/tests/plan/fixtures/lowmem_4xh100.toml";

const Catalog& catalog() {
  static const Catalog cat = load_catalog(std::string(AISCALE_SOURCE_DIR) + "/data/systems", {kFixture});
  return cat;
}

PlanResult plan_on_4(const std::string& model, long gpus = 4) {
  PlanRequest r;
  r.workload = make_workload(model);
  r.tokens = 1e9;
  r.gpus = gpus;
  return plan(r, catalog().resolve("lowmem-test/gpu"), catalog(), Calibration{}, Assumptions{});
}

// The same partition with 1 TiB of host memory per node: every layout keeps a rank on each
// of a node's GPUs.
const Catalog& roomy_catalog() {
  static const Catalog cat = [] {
    Catalog c = catalog();
    for (System& s : c.systems)
      if (s.id == "lowmem-test")
        for (Partition& p : s.partitions) p.ram_gib = 1024;
    return c;
  }();
  return cat;
}

// GPT-2 6.6B on the fixture's partition (or the roomy copy): `gpus` fixed, or with gpus = 0
// the counts searched up to `max_gpus`, adding GPUs while --min-efficiency allows.
Candidate best_6_6b(const Catalog& cat, long gpus, long max_gpus = 0, double min_efficiency = 0.7) {
  PlanRequest r;
  r.workload = make_workload("gpt2-6.6b");
  r.tokens = 1e9;
  r.gpus = gpus;
  r.max_gpus = max_gpus;
  r.min_efficiency = min_efficiency;
  r.min_duration_s = 0;  // --rank time: the most GPUs --min-efficiency allows
  const PlanResult res = plan(r, cat.resolve("lowmem-test/gpu"), cat, Calibration{}, Assumptions{});
  if (res.ranked.size() != 1) {
    ADD_FAILURE() << (res.rejected.empty() ? "nothing ranked" : res.rejected[0].reason);
    return {};
  }
  return res.ranked[0];
}

TEST(PlanRanksPerNode, HostMemoryForTwoRanksPlansTwoPerNodeOnTwiceTheNodes) {
  const PlanResult res = plan_on_4("gpt2-6.6b");
  ASSERT_EQ(res.ranked.size(), 1u) << (res.rejected.empty() ? "" : res.rejected[0].reason);
  const Candidate& c = res.ranked[0];
  EXPECT_TRUE(c.runs()) << c.engine_gap;
  EXPECT_EQ(c.layout.gpus(), 4);
  EXPECT_EQ(c.layout.ranks_per_node, 2);
  EXPECT_EQ(c.ranks_per_node(), 2);
  EXPECT_EQ(c.step.nodes, 2);
  EXPECT_EQ(c.step.gpus_per_node_used, 2);
  EXPECT_EQ(c.layout.transport, GradTransport::nccl);
  // The job allocates the two whole nodes: 8 GPUs' hours.
  EXPECT_EQ(c.allocated_gpus(), 8);
  EXPECT_NEAR(c.gpu_hours, c.days * 24.0 * 8, 1e-9 * c.gpu_hours);
  const Assumptions a;
  EXPECT_DOUBLE_EQ(c.startup_s, a.startup_fixed_s + 2 * a.startup_per_node_s);

  // The same layout with all four ranks on one node: its traffic stays inside the node, so
  // the reduced placement is not faster.
  Layout full = c.layout;
  full.ranks_per_node = 0;
  const Partition& part = *c.target.partition;
  PlanRequest r;
  r.workload = make_workload("gpt2-6.6b");
  const Workload w = workload_on(r, part);
  const StepEstimate one = estimate_step(w, full, part, c.figures, r.precision, a);
  const StepEstimate two = estimate_step(w, c.layout, part, c.figures, r.precision, a);
  EXPECT_EQ(one.nodes, 1);
  EXPECT_EQ(two.nodes, 2);
  EXPECT_GE(two.step_s, one.step_s);
  EXPECT_GE(two.dp_comm_s, one.dp_comm_s);
}

// Strong scaling counts the GPUs the job holds: 4 GPUs at 2 per node allocate 8, so against
// the 2 GPUs of the base their per-GPU throughput is about half of what the same layout
// reaches with all 4 ranks on one node.
TEST(PlanRanksPerNode, ScalingEfficiencyCountsTheAllocatedGpus) {
  const Candidate base = best_6_6b(catalog(), 2);
  const Candidate low = best_6_6b(catalog(), 0, 4, 0.01);
  const Candidate roomy = best_6_6b(roomy_catalog(), 0, 4, 0.01);
  ASSERT_EQ(base.layout.gpus(), 2);
  EXPECT_EQ(base.allocated_gpus(), 2);
  ASSERT_EQ(low.layout.gpus(), 4);
  ASSERT_EQ(low.layout.ranks_per_node, 2);
  ASSERT_EQ(low.allocated_gpus(), 8);
  ASSERT_EQ(roomy.layout.gpus(), 4);
  ASSERT_EQ(roomy.allocated_gpus(), 4);
  EXPECT_EQ(low.base_gpus, 2);
  EXPECT_EQ(low.base_allocated_gpus, 2);
  EXPECT_EQ(roomy.base_gpus, 2);
  // (base time × 2 GPUs) over (this time × 8 GPUs allocated), start-up included.
  EXPECT_NEAR(low.scaling, base.days * 2 / (low.days * 8), 1e-9);
  EXPECT_NEAR(roomy.scaling, base.days * 2 / (roomy.days * 4), 1e-9);
  EXPECT_LT(low.scaling, 0.5 * roomy.scaling * (1 + 1e-9));
  // Per GPU used the layout scales as it would on full nodes, a little slower across them.
  EXPECT_NEAR(low.scaling_used, base.days * 2 / (low.days * 4), 1e-9);
  EXPECT_NEAR(roomy.scaling_used, roomy.scaling, 1e-12);
  EXPECT_LE(low.scaling_used, roomy.scaling_used);
  // The per-batch, training-part and epoch efficiencies count them alike.
  EXPECT_NEAR(low.eff_batch, (low.step.samples_per_s / 8) / (base.step.samples_per_s / 2), 1e-9);
  EXPECT_LT(low.eff_epoch, 0.5 * roomy.eff_epoch * (1 + 1e-9));
  // The efficiency against one ideal GPU counts the 8 GPUs' time too.
  EXPECT_NEAR(low.efficiency, low.ideal_step_s / (low.step.step_s * 8), 1e-9);
  EXPECT_NEAR(low.efficiency_used, low.ideal_step_s / (low.step.step_s * 4), 1e-9);
  EXPECT_NEAR(roomy.efficiency, roomy.efficiency_used, 1e-12);
}

// --min-efficiency bounds what the job holds: the 4-GPU plan at 2 per node falls below
// 0.7 of the base and is not proposed; with room for 4 ranks on a node it is.
TEST(PlanRanksPerNode, MinEfficiencyExcludesHalfIdleNodes) {
  const Candidate low = best_6_6b(catalog(), 0, 4);
  const Candidate roomy = best_6_6b(roomy_catalog(), 0, 4);
  EXPECT_EQ(low.layout.gpus(), 2);
  EXPECT_EQ(low.allocated_gpus(), 2);
  EXPECT_EQ(roomy.layout.gpus(), 4);
  EXPECT_GE(roomy.scaling, 0.7);
  // Below the bound only through its idle GPUs: per GPU used the 4-GPU plan would pass.
  const Candidate four = best_6_6b(catalog(), 0, 4, 0.01);
  ASSERT_EQ(four.layout.gpus(), 4);
  EXPECT_LT(four.scaling, 0.7);
  EXPECT_GE(four.scaling_used, 0.7);
}

// The idle GPUs of the nodes the job allocates draw far less than board power: 4 GPUs at 2
// per node use less than twice the energy of 4 on one node, though they hold twice the GPUs.
TEST(PlanRanksPerNode, IdleGpusOfTheNodesAreNotCountedAtBoardPower) {
  const Candidate low = best_6_6b(catalog(), 4);
  const Candidate roomy = best_6_6b(roomy_catalog(), 4);
  ASSERT_EQ(low.allocated_gpus(), 8);
  ASSERT_EQ(roomy.allocated_gpus(), 4);
  const double watts = low.target.partition->accelerator.board_power_w;
  ASSERT_GT(watts, 0);
  EXPECT_NEAR(roomy.energy_kwh, roomy.days * 24 * 4 * watts / 1000, 1e-9 * roomy.energy_kwh);
  EXPECT_LT(low.energy_kwh, 2 * roomy.energy_kwh);
  // The 4 ranks' GPUs at board power, the 4 idle ones at the idle share of it.
  EXPECT_GT(low.energy_kwh, low.days * 24 * 4 * watts / 1000);
  EXPECT_LT(low.energy_kwh, low.days * 24 * 8 * watts / 1000);
  const Assumptions a;
  EXPECT_GT(a.idle_power_fraction, 0);
  EXPECT_LT(a.idle_power_fraction, 1);
  EXPECT_NEAR(low.energy_kwh, low.days * 24 * (4 + 4 * a.idle_power_fraction) * watts / 1000,
              1e-9 * low.energy_kwh);
  // GPU-hours still count all 8.
  EXPECT_NEAR(low.gpu_hours, low.days * 24 * 8, 1e-9 * low.gpu_hours);
}

TEST(PlanRanksPerNode, ModelThatFitsKeepsAllGpusOfANode) {
  const PlanResult res = plan_on_4("gpt2-350m");
  ASSERT_EQ(res.ranked.size(), 1u);
  const Candidate& c = res.ranked[0];
  EXPECT_EQ(c.layout.ranks_per_node, 0);
  EXPECT_EQ(c.ranks_per_node(), 4);
  EXPECT_EQ(c.step.nodes, 1);
  EXPECT_EQ(c.allocated_gpus(), 4);
}

// GPT-3 175B fits 64 GPUs' memory under ZeRO-3, but one rank alone needs 1.9 TiB of host
// memory.
TEST(PlanRanksPerNode, NotEvenOneRankPerNodeIsRefusedWithTheBytes) {
  const PlanResult res = plan_on_4("gpt3-175b", 64);
  EXPECT_TRUE(res.ranked.empty());
  ASSERT_EQ(res.rejected.size(), 1u);
  const std::string& why = res.rejected[0].reason;
  EXPECT_NE(why.find("not even one rank per node fits"), std::string::npos) << why;
  EXPECT_NE(why.find("12 bytes per parameter"), std::string::npos) << why;
  EXPECT_NE(why.find("160 GiB"), std::string::npos) << why;
}

TEST(PlanRanksPerNode, TableJsonAndEmittedScriptSayTwoPerNode) {
  const std::string args = "plan --model gpt2-6.6b --tokens 1e9 --gpus 4 --systems '" + kFixture +
                           "' --system lowmem-test/gpu";
  auto r = testsupport::run_aiscale(args);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("4 (2n×2/4)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("ranks per node 2/4"), std::string::npos) << r.output;
  // (Long lines wrap: compared with every run of spaces and line breaks as one space.)
  std::string flat;
  for (char ch : r.output) {
    const bool space = ch == ' ' || ch == '\n';
    if (!space || flat.empty() || flat.back() != ' ') flat += space ? ' ' : ch;
  }
  EXPECT_NE(flat.find("here × 8 GPUs allocated); "), std::string::npos) << r.output;
  EXPECT_NE(flat.find("over the 4 GPUs used"), std::string::npos) << r.output;
  r = testsupport::run_aiscale(args + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  ASSERT_EQ(j["ranked"].size(), 1u);
  EXPECT_EQ(j["ranked"][0]["ranks_per_node"].get<int>(), 2);
  EXPECT_EQ(j["ranked"][0]["allocated_gpus"].get<int>(), 8);
  // Both efficiencies: over the 8 GPUs allocated (what the table shows) and the 4 used.
  const auto& row = j["ranked"][0];
  EXPECT_NEAR(row["efficiency"].get<double>(), 0.5 * row["efficiency_gpus_used"].get<double>(), 1e-9);
  EXPECT_EQ(row["scaling_base_allocated_gpus"].get<int>(), 8);
  EXPECT_NEAR(row["scaling_efficiency"].get<double>(), 1.0, 1e-9);
  EXPECT_NEAR(row["scaling_efficiency_gpus_used"].get<double>(), 1.0, 1e-9);
  EXPECT_EQ(row["epoch"]["efficiency"]["base_allocated_gpus"].get<int>(), 8);
  EXPECT_DOUBLE_EQ(j["assumptions"]["idle_power_fraction"].get<double>(), Assumptions{}.idle_power_fraction);
  const auto small = testsupport::run_aiscale(
      "plan --model gpt2-350m --tokens 1e9 --gpus 4 --json --systems '" + kFixture + "' --system lowmem-test/gpu");
  ASSERT_EQ(small.exit_code, 0) << small.output;
  EXPECT_EQ(nlohmann::json::parse(small.output)["ranked"][0]["ranks_per_node"].get<int>(), 4);

  const auto dir = testsupport::temp_dir("plan-rpn-emit");
  r = testsupport::run_aiscale(args + " --emit '" + (dir / "emitted").string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string script = testsupport::read_bytes(dir / "emitted" / "job.sbatch");
  EXPECT_NE(script.find("--nodes=2"), std::string::npos) << script;
  EXPECT_NE(script.find("--ntasks-per-node=2"), std::string::npos) << script;
  EXPECT_NE(script.find("--gpus-per-node=2"), std::string::npos) << script;
}

}  // namespace
}  // namespace aiscale::plan
