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
  r = testsupport::run_aiscale(args + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  ASSERT_EQ(j["ranked"].size(), 1u);
  EXPECT_EQ(j["ranked"][0]["ranks_per_node"].get<int>(), 2);
  EXPECT_EQ(j["ranked"][0]["allocated_gpus"].get<int>(), 8);
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
