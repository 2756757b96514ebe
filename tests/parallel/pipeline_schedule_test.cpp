// The pipeline schedules' tables, checked without communication.
#include <gtest/gtest.h>

#include <algorithm>

#include "aiscale/core/error.h"
#include "aiscale/parallel/pipeline/schedule.h"

using namespace aiscale::parallel::pipeline;

namespace {
std::vector<StageSchedule> all_stages(const std::string& name, int pp, int m) {
  std::vector<StageSchedule> s;
  for (int stage = 0; stage < pp; ++stage) s.push_back(schedule_by_name(name, pp, stage, m));
  return s;
}
}  // namespace

TEST(PipelineSchedule, OneFOneBOrderOnFourStages) {
  // Stage 0 of 4 with 6 micro-batches: 3 warm-up forwards, then alternating, then drain.
  const StageSchedule s = one_f_one_b_schedule(4, 0, 6);
  const StageSchedule want = {
      {PassKind::forward, 0},  {PassKind::forward, 1},  {PassKind::forward, 2},
      {PassKind::forward, 3},  {PassKind::backward, 0}, {PassKind::forward, 4},
      {PassKind::backward, 1}, {PassKind::forward, 5},  {PassKind::backward, 2},
      {PassKind::backward, 3}, {PassKind::backward, 4}, {PassKind::backward, 5}};
  EXPECT_EQ(s, want);
  // The last stage alternates from the start.
  const StageSchedule last = one_f_one_b_schedule(4, 3, 2);
  EXPECT_EQ(last, (StageSchedule{{PassKind::forward, 0}, {PassKind::backward, 0},
                                 {PassKind::forward, 1}, {PassKind::backward, 1}}));
}

TEST(PipelineSchedule, EveryMicrobatchOnceForwardThenBackward) {
  for (const char* name : {"gpipe", "1f1b"})
    for (int pp : {1, 2, 3, 4})
      for (int m : {pp, pp + 1, 2 * pp + 1})
        for (int stage = 0; stage < pp; ++stage) {
          const StageSchedule s = schedule_by_name(name, pp, stage, m);
          ASSERT_EQ(s.size(), size_t(2 * m)) << name;
          std::vector<int> fwd(m, -1), bwd(m, -1);
          for (size_t i = 0; i < s.size(); ++i)
            (s[i].kind == PassKind::forward ? fwd : bwd)[s[i].microbatch] = int(i);
          for (int k = 0; k < m; ++k) {
            EXPECT_GE(fwd[k], 0);
            EXPECT_GT(bwd[k], fwd[k]) << name << " pp " << pp << " stage " << stage << " m " << k;
          }
        }
}

TEST(PipelineSchedule, OneFOneBHoldsFewerActivations) {
  EXPECT_EQ(max_in_flight(gpipe_schedule(4, 0, 8)), 8);
  for (int stage = 0; stage < 4; ++stage)
    EXPECT_EQ(max_in_flight(one_f_one_b_schedule(4, stage, 8)), 4 - stage);
}

TEST(PipelineSchedule, BubbleIsTheTextbookFraction) {
  // Equal stage times: idle fraction (pp - 1) / (m + pp - 1) for both schedules.
  for (const char* name : {"gpipe", "1f1b"})
    for (int pp : {2, 4})
      for (int m : {pp, 4 * pp}) {
        const double b = simulated_bubble(all_stages(name, pp, m));
        EXPECT_NEAR(b, double(pp - 1) / (m + pp - 1), 1e-9) << name << " pp " << pp << " m " << m;
      }
  EXPECT_EQ(simulated_bubble(all_stages("gpipe", 1, 3)), 0.0);
}

// The GPU stages run a micro-batch's forward again before its backward (from the stashed
// input), without waiting for the downstream gradient, unless their last pass was that
// forward. 4 stages x 8 micro-batches, forward 1, backward 2, recomputation 1: under 1F1B
// the first three stages recompute every micro-batch (8 x 4 units), the last never
// (8 x 3); the pipeline ends at 39 units, 7 after the first stage's own work. GPipe runs
// the backwards in micro-batch order, so every stage recomputes all 8 (32 units), ending
// at 41.
TEST(PipelineSchedule, RecomputationBeforeEachBackwardAsTheGpuStagesRunIt) {
  PipelineRun run = simulate_pipeline(all_stages("1f1b", 4, 8), 1.0, 2.0, 1.0);
  ASSERT_FALSE(run.deadlock);
  EXPECT_DOUBLE_EQ(run.makespan, 39.0);
  EXPECT_EQ(run.busy, (std::vector<double>{32, 32, 32, 24}));
  run = simulate_pipeline(all_stages("gpipe", 4, 8), 1.0, 2.0, 1.0);
  EXPECT_DOUBLE_EQ(run.makespan, 41.0);
  EXPECT_EQ(run.busy, (std::vector<double>{32, 32, 32, 32}));
  // Without recomputation it is the textbook pipeline: (m + pp - 1) x (forward + backward).
  run = simulate_pipeline(all_stages("1f1b", 4, 8), 1.0, 2.0);
  EXPECT_DOUBLE_EQ(run.makespan, 33.0);
}

TEST(PipelineSchedule, ABackwardBeforeItsForwardIsDetected) {
  // A backward before its forward is an error.
  std::vector<StageSchedule> bad = {{{PassKind::backward, 0}, {PassKind::forward, 0}}};
  EXPECT_LT(simulated_bubble(bad), 0.0);
  // Two stages waiting on each other: stage 0 runs backward 0 (needs stage 1's) before
  // forward 1, stage 1 wants forward 1 before backward 0.
  std::vector<StageSchedule> stuck = {
      {{PassKind::forward, 0}, {PassKind::backward, 0}, {PassKind::forward, 1}, {PassKind::backward, 1}},
      {{PassKind::forward, 0}, {PassKind::forward, 1}, {PassKind::backward, 0}, {PassKind::backward, 1}}};
  EXPECT_LT(simulated_bubble(stuck), 0.0);
}

// The stages' layers tile [0, n_layer) in order, each stage at least one layer and the
// sizes differing by at most one (the CPU and GPU models both split this way).
TEST(PipelineSchedule, StageLayersTileTheModelEvenly) {
  for (int64_t layers : {1, 2, 5, 12, 13}) {
    for (int stages = 1; stages <= layers && stages <= 8; ++stages) {
      int64_t next = 0, smallest = layers, largest = 0;
      for (int s = 0; s < stages; ++s) {
        const StageLayers r = stage_layers(layers, stages, s);
        EXPECT_EQ(r.begin, next) << layers << " layers, stage " << s << " of " << stages;
        EXPECT_GE(r.end - r.begin, 1);
        smallest = std::min(smallest, r.end - r.begin);
        largest = std::max(largest, r.end - r.begin);
        next = r.end;
      }
      EXPECT_EQ(next, layers);
      EXPECT_LE(largest - smallest, 1);
    }
  }
  EXPECT_EQ(stage_layers(12, 2, 1).begin, 6);
  EXPECT_EQ(stage_layers(5, 2, 0).end, 2);  // 5 * 1 / 2: the later stage takes the odd layer
  EXPECT_THROW(stage_layers(4, 2, 2), aiscale::Error);
}
