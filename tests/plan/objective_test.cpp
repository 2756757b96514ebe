// Plans a user would take: the objective decides the GPU count (time, GPU-hours, the
// smallest allocation within a deadline), never more GPUs than the job uses at the
// minimum efficiency, small jobs stay on one node, and the efficiency column has one
// baseline and stays at or below 1.
#include <gtest/gtest.h>

#include "aiscale/core/error.h"
#include "aiscale/plan/planner.h"
#include "aiscale/plan/units.h"

namespace aiscale::plan {
namespace {

const Catalog& catalog() {
  static const Catalog cat = load_catalog(std::string(AISCALE_SOURCE_DIR) + "/data/systems");
  return cat;
}

PlanRequest gpt(const char* model, double tokens) {
  PlanRequest r;
  r.workload = make_workload(model);
  r.tokens = tokens;
  return r;
}

TEST(PlanObjective, ATwoGpuHourJobStaysOnOneNode) {
  // GPT-2 124M on 1e9 tokens: about 2 GPU-hours on an A100/H100.
  const PlanResult res = plan(gpt("gpt2-124m", 1e9), catalog().gpu_targets(), catalog(),
                              Calibration{}, Assumptions{});
  ASSERT_FALSE(res.ranked.empty());
  for (const auto& c : res.ranked) {
    EXPECT_LE(c.step.nodes, 1) << c.target.label() << ": " << c.layout.gpus() << " GPUs";
    EXPECT_LT(c.gpu_hours, 10) << c.target.label();
  }
}

TEST(PlanObjective, EfficiencyHasOneBaselineAndStaysAtOrBelowOne) {
  PlanRequest r = gpt("gpt2-350m", 10e9);
  const PlanResult res = plan(r, catalog().gpu_targets(), catalog(), Calibration{}, Assumptions{});
  for (const auto& c : res.ranked) {
    EXPECT_GT(c.ideal_step_s, 0) << c.target.label();
    EXPECT_LE(c.efficiency, 1.0 + 1e-9) << c.target.label() << ": " << c.efficiency_note;
    // Never more GPUs than the job uses at --min-efficiency.
    if (c.layout.gpus() > c.base_gpus) {
      EXPECT_GE(c.scaling, r.min_efficiency) << c.target.label();
    }
    // The baseline is the same whatever the GPU count: one GPU's ideal step × GPUs ≥ step.
    EXPECT_NEAR(c.efficiency, c.ideal_step_s / (c.step.step_s * c.layout.gpus()), 1e-12);
  }
}

TEST(PlanObjective, ObjectivesChooseDifferentAllocations) {
  const auto leonardo = catalog().resolve("leonardo");
  PlanRequest r = gpt("gpt2-1558m", 30e9);
  const Candidate fast = plan(r, leonardo, catalog(), Calibration{}, Assumptions{}).ranked.at(0);
  r.objective = Objective::gpu_hours;
  const Candidate cheap = plan(r, leonardo, catalog(), Calibration{}, Assumptions{}).ranked.at(0);
  EXPECT_LT(cheap.layout.gpus(), fast.layout.gpus());
  EXPECT_LE(cheap.gpu_hours, fast.gpu_hours);
  EXPECT_GT(cheap.days, fast.days);
  // The smallest allocation that finishes within a deadline between the two.
  r.objective = Objective::smallest;
  r.deadline_s = 0.5 * (cheap.days + fast.days) * 86400.0;
  const Candidate small = plan(r, leonardo, catalog(), Calibration{}, Assumptions{}).ranked.at(0);
  EXPECT_LE(small.days * 86400.0, *r.deadline_s);
  EXPECT_GT(small.layout.gpus(), cheap.layout.gpus());
  EXPECT_LE(small.layout.gpus(), fast.layout.gpus());
  // Without a deadline "smallest" is refused with the fix.
  r.deadline_s.reset();
  EXPECT_THROW(plan(r, leonardo, catalog(), Calibration{}, Assumptions{}), Error);
}

TEST(PlanObjective, StartUpIsChargedOnce) {
  const Assumptions a;
  const PlanResult res = plan(gpt("gpt2-124m", 1e8), catalog().resolve("leonardo"), catalog(),
                              Calibration{}, a);
  const Candidate& c = res.ranked.at(0);
  EXPECT_DOUBLE_EQ(c.startup_s, a.startup_fixed_s + a.startup_per_node_s * c.step.nodes);
  // Start-up once; each epoch its steps (a partial last batch costs a whole step), the
  // loading the steps do not hide and validation (none here).
  EXPECT_NEAR(c.days * 86400.0, c.startup_s + c.epochs * (c.epoch.train_part_s + c.epoch.validation_s), 1e-6);
  EXPECT_NEAR(c.days * 86400.0, c.steps * c.step.step_s + c.startup_s + c.epochs * c.epoch.load_exposed_s, 1e-6);
  EXPECT_LT(c.epoch.load_exposed_s, 1e-3 * c.days * 86400.0);
}

TEST(PlanObjective, DurationsParse) {
  EXPECT_DOUBLE_EQ(parse_duration("36h", "--deadline"), 36 * 3600.0);
  EXPECT_DOUBLE_EQ(parse_duration("3d", "--deadline"), 3 * 86400.0);
  EXPECT_DOUBLE_EQ(parse_duration("90min", "--deadline"), 5400.0);
  EXPECT_DOUBLE_EQ(parse_duration("2w", "--deadline"), 14 * 86400.0);
  EXPECT_DOUBLE_EQ(parse_duration("45", "--deadline"), 45.0);
  EXPECT_THROW(parse_duration("soon", "--deadline"), Error);
  EXPECT_THROW(parse_duration("-3h", "--deadline"), Error);
  EXPECT_THROW(parse_duration("3 parsecs", "--deadline"), Error);
  EXPECT_EQ(duration(90), "90.00 s");
  EXPECT_EQ(duration(600), "10.0 min");
  EXPECT_EQ(duration(5 * 3600), "5.0 h");
  EXPECT_EQ(duration(3 * 86400), "3.0 days");
}

}  // namespace
}  // namespace aiscale::plan

namespace aiscale::plan {
namespace {

// Every ZeRO stage's communication hides alike: inside a node its bytes behind the compute
// beside them, each collective at the same cost (perf.cpp), so ZeRO-3, which moves as many
// bytes per step as DDP's all-reduce (two weight gathers and a gradient reduce-scatter) in
// three collectives per layer to DDP's one, is not predicted to expose less.
TEST(PlanObjective, ZeroStagesHideTheirCommunicationAlike) {
  const Catalog& cat = catalog();
  const Target t = cat.resolve("jupiter")[0];
  const Workload w = make_workload("gpt2-1558m");
  const MachineFigures m = machine_figures(t, w, Precision::bf16, Calibration{}, cat, Assumptions{});
  Layout l;
  l.dp = 4;
  l.micro_batch = 4;
  const StepEstimate ddp = estimate_step(w, l, *t.partition, m, Precision::bf16, Assumptions{});
  l.zero = 3;
  const StepEstimate z3 = estimate_step(w, l, *t.partition, m, Precision::bf16, Assumptions{});
  l.zero = 2;
  const StepEstimate z2 = estimate_step(w, l, *t.partition, m, Precision::bf16, Assumptions{});
  auto shown = [](const StepEstimate& e) { return e.dp_exposed_s + e.overlap_cost_s; };
  EXPECT_GE(shown(z3), 0.95 * shown(ddp));
  EXPECT_GE(z3.step_s - z3.optimizer_s, 0.98 * (ddp.step_s - ddp.optimizer_s));
  // ZeRO-2 moves 4 + 2 bytes per parameter (fp32 gradients reduce-scattered, 16-bit weights
  // gathered) where DDP's all-reduce moves 4 + 4: it exposes that share, no less.
  EXPECT_GE(shown(z2), 0.95 * 6.0 / 8.0 * shown(ddp));
}

}  // namespace
}  // namespace aiscale::plan
