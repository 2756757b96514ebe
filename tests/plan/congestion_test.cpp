// Congestion on a Dragonfly's global links (collectives.h, global_congestion): a data-
// parallel GPT-2 350M run loses efficiency at hundreds of GPUs once it spans several groups,
// against the same partition with untapered global links (the model before the term).
#include <cmath>
#include <numbers>

#include <gtest/gtest.h>

#include "aiscale/plan/planner.h"

namespace aiscale::plan {
namespace {

const std::string kFixtures = std::string(AISCALE_SOURCE_DIR) + "/tests/plan/fixtures/";

struct Fixture {
  Catalog cat = load_catalog(std::string(AISCALE_SOURCE_DIR) + "/data/systems",
                             {kFixtures + "dragonfly_h100.toml"});
};

// Weak scaling from one node: micro-batch 8 per GPU, plain data parallelism.
Candidate run(const Fixture& f, const std::string& partition, long gpus) {
  PlanRequest r;
  r.workload = make_workload("gpt2-350m");
  r.tokens = 1e9;
  r.gpus = gpus;
  r.global_batch = 8 * gpus;
  r.pins.micro_batch = 8;
  r.pins.zero = 0;
  r.pins.tp = 1;
  r.pins.pp = 1;
  const PlanResult res = plan(r, f.cat.resolve("dragonfly-test/" + partition), f.cat, Calibration{}, Assumptions{});
  EXPECT_EQ(res.ranked.size(), 1u) << partition << " " << gpus;
  return res.ranked.at(0);
}

TEST(PlanCongestion, EfficiencyFallsAcrossDragonflyGroups) {
  const Fixture f;
  const Candidate one_node = run(f, "tapered", 4);
  for (long gpus : {128L, 256L}) {  // 1 and 2 groups of 32 nodes: no congestion yet
    EXPECT_DOUBLE_EQ(run(f, "tapered", gpus).step.step_s, run(f, "untapered", gpus).step.step_s) << gpus;
  }
  double last_eff = 1.0;
  for (long gpus : {512L, 1024L, 2048L}) {  // 4, 8, 16 groups
    const Candidate t = run(f, "tapered", gpus), u = run(f, "untapered", gpus);
    const double eff_t = one_node.step.step_s / t.step.step_s;
    const double eff_u = one_node.step.step_s / u.step.step_s;
    EXPECT_LT(t.step.topology_factor, u.step.topology_factor) << gpus;
    EXPECT_LT(eff_t, eff_u - 0.01) << gpus << " GPUs: " << eff_t << " against " << eff_u;
    EXPECT_LT(eff_t, last_eff) << gpus;  // falls as the job spans more groups
    last_eff = eff_t;
  }
}

TEST(PlanStragglers, ExpectedMaximumOfNormals) {
  EXPECT_DOUBLE_EQ(expected_max_normal(1), 0.0);
  EXPECT_NEAR(expected_max_normal(2), 1.0 / std::sqrt(std::numbers::pi), 1e-6);  // exact: 1/√π
  EXPECT_NEAR(expected_max_normal(4), 1.029375, 1e-5);
  EXPECT_NEAR(expected_max_normal(512), 3.043903, 1e-4);
}

TEST(PlanStragglers, WaitGrowsWithRanksAndShrinksWithAccumulation) {
  // The straggler term on a toy step: σ × compute × E[max of n] / √accumulation.
  const Fixture f;
  const Candidate a = run(f, "untapered", 8), b = run(f, "untapered", 512);
  EXPECT_NEAR(a.step.straggler_s,
              a.figures.step_spread.value * (a.step.compute_s + a.step.optimizer_s) * expected_max_normal(8),
              1e-12);
  EXPECT_GT(b.step.straggler_s, 2.0 * a.step.straggler_s);
  EXPECT_FALSE(a.figures.step_spread.measured);
  EXPECT_DOUBLE_EQ(a.figures.step_spread.value, Assumptions{}.step_spread_gpu);
}

}  // namespace
}  // namespace aiscale::plan
