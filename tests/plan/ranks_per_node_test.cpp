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

// `plan scaling` on the fixture's partition for GPT-2 6.6B: rows for the GPUs of 1, 2, 4,
// 8 and 16 nodes.
ScalingCurve curve_6_6b(const Catalog& cat, long max_nodes = 64) {
  PlanRequest r;
  r.workload = make_workload("gpt2-6.6b");
  r.tokens = 1e9;
  return scaling_curve(r, cat.resolve("lowmem-test/gpu").at(0), max_nodes, cat, Calibration{},
                       Assumptions{});
}

// A row's nodes are the nodes its run uses: 4 GPUs at 2 ranks per node take 2 nodes, not
// 4 / 4 = 1, and allocate all their GPUs.
TEST(PlanRanksPerNode, ScalingRowsShowTheNodesUsed) {
  const ScalingCurve c = curve_6_6b(catalog());
  ASSERT_EQ(c.strong.size(), 5u);
  ASSERT_EQ(c.weak.size(), 5u);
  for (const auto* rows : {&c.strong, &c.weak})
    for (const ScalingRow& row : *rows) {
      if (!row.run) continue;
      EXPECT_EQ(row.gpus, row.run->layout.gpus());
      EXPECT_EQ(row.nodes, row.run->step.nodes) << row.gpus << " GPUs";
      EXPECT_EQ(row.nodes * 4, row.run->allocated_gpus()) << row.gpus << " GPUs";
    }
  // The first four strong rows place 2 ranks per node, like the plan at those GPU counts.
  for (size_t i = 0; i < 4; ++i) {
    const ScalingRow& row = c.strong[i];
    ASSERT_TRUE(row.run) << row.note;
    EXPECT_EQ(row.gpus, 4L << i);
    EXPECT_EQ(row.run->layout.ranks_per_node, 2);
    EXPECT_EQ(row.nodes, 2L << i);
  }
  EXPECT_EQ(best_6_6b(catalog(), 4).layout.ranks_per_node, c.strong[0].run->layout.ranks_per_node);
  // 64 GPUs at 2 per node would need 32 nodes of the 16: no run, the row's whole nodes.
  EXPECT_FALSE(c.strong[4].run);
  EXPECT_EQ(c.strong[4].nodes, 16);

  // With room for 4 ranks on a node, GPUs / 4.
  const ScalingCurve roomy = curve_6_6b(roomy_catalog());
  for (const ScalingRow& row : roomy.strong) {
    ASSERT_TRUE(row.run) << row.note;
    EXPECT_EQ(row.run->layout.ranks_per_node, 0);
    EXPECT_EQ(row.nodes, row.gpus / 4);
  }

  // --max-nodes bounds the nodes a row uses: 16 GPUs at 2 per node need 8 nodes.
  const ScalingCurve four = curve_6_6b(catalog(), 4);
  ASSERT_EQ(four.strong.size(), 3u);
  EXPECT_TRUE(four.strong[1].run);
  EXPECT_FALSE(four.strong[2].run);
  EXPECT_NE(four.strong[2].note.find("need 8 nodes, above --max-nodes 4"), std::string::npos)
      << four.strong[2].note;
  ASSERT_EQ(four.weak.size(), 3u);
  EXPECT_FALSE(four.weak[2].run);
}

// Weak scaling places each row's ranks as the plan does: GPT-2 6.6B does not fit 4 ranks'
// host memory on a node but fits 2, so the rows up to 32 GPUs run at 2 per node; 64 GPUs
// would need 32 nodes at 2 per node, so that row stays a what-if, marked, saying why.
TEST(PlanRanksPerNode, WeakScalingRowsThatFitAtFewerRanksPerNodeRun) {
  const ScalingCurve c = curve_6_6b(catalog());
  ASSERT_EQ(c.weak.size(), 5u);
  for (size_t i = 0; i < 4; ++i) {
    const ScalingRow& row = c.weak[i];
    ASSERT_TRUE(row.run) << row.note;
    const Candidate& x = *row.run;
    EXPECT_TRUE(x.runs()) << row.gpus << " GPUs: " << x.engine_gap;
    EXPECT_EQ(x.layout.gpus(), 4L << i);
    EXPECT_EQ(x.layout.ranks_per_node, 2);
    EXPECT_EQ(x.ranks_per_node(), 2);
    EXPECT_EQ(x.layout.transport, GradTransport::nccl);
    EXPECT_EQ(x.step.nodes, 2L << i);
    EXPECT_EQ(x.allocated_gpus(), 8L << i);
    // Micro-batch and accumulation per copy stay as at the base.
    EXPECT_EQ(x.layout.micro_batch, c.base.micro_batch);
    EXPECT_EQ(x.layout.grad_accum, c.base.grad_accum);
  }
  // The first weak row is the strong table's first, placed alike.
  EXPECT_DOUBLE_EQ(c.weak[0].run->step.step_s, c.strong[0].run->step.step_s);
  const ScalingRow& last = c.weak[4];
  ASSERT_TRUE(last.run);
  EXPECT_FALSE(last.run->runs());
  EXPECT_EQ(last.run->layout.ranks_per_node, 0);
  EXPECT_NE(last.run->engine_gap.find("2 ranks per node would need 32 nodes, the partition has 16"),
            std::string::npos) << last.run->engine_gap;

  // With room for 4 ranks on a node every row runs on full nodes.
  const ScalingCurve roomy = curve_6_6b(roomy_catalog());
  for (const ScalingRow& row : roomy.weak) {
    ASSERT_TRUE(row.run) << row.note;
    EXPECT_TRUE(row.run->runs()) << row.run->engine_gap;
    EXPECT_EQ(row.run->layout.ranks_per_node, 0);
  }
}

TEST(PlanRanksPerNode, ScalingTableAndJsonShowTheNodesUsed) {
  const std::string args = "plan scaling --model gpt2-6.6b --tokens 1e9 --max-nodes 8 --systems '" +
                           kFixture + "' --system lowmem-test/gpu";
  auto r = testsupport::run_aiscale(args);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // nodes ×ranks per node/GPUs per node, then the GPUs; no weak row marked as not running.
  EXPECT_NE(r.output.find("2×2/4     4     4×1×1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("8×2/4    16    16×1×1"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find(" *"), std::string::npos) << r.output;
  r = testsupport::run_aiscale(args + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  for (const char* table : {"strong", "weak"}) {
    ASSERT_EQ(j[table].size(), 4u) << table;
    for (size_t i = 0; i < 3; ++i) {
      const auto& row = j[table][i];
      ASSERT_TRUE(row.contains("run")) << table << " " << row.dump();
      EXPECT_EQ(row["gpus"].get<long>(), 4L << i) << table;
      EXPECT_EQ(row["nodes"].get<long>(), 2L << i) << table;
      EXPECT_EQ(row["nodes"].get<long>(), row["run"]["step"]["nodes"].get<long>()) << table;
      EXPECT_EQ(row["ranks_per_node"].get<int>(), 2) << table;
      EXPECT_EQ(row["allocated_gpus"].get<long>(), 8L << i) << table;
      EXPECT_TRUE(row["run"]["runs_in_aiscale_train"].get<bool>()) << table;
    }
    // 32 GPUs at 2 per node would take 16 nodes, above --max-nodes 8.
    const auto& last = j[table][3];
    EXPECT_FALSE(last.contains("run")) << table;
    EXPECT_EQ(last["gpus"].get<long>(), 32) << table;
    EXPECT_NE(last["note"].get<std::string>().find("need 16 nodes, above --max-nodes 8"),
              std::string::npos) << last.dump();
  }
}

}  // namespace
}  // namespace aiscale::plan
