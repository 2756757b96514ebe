// The study statistics on fixed inputs whose results were worked out by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "aiscale/core/error.h"
#include "aiscale/sweep/statistics.h"
#include "../support/run_support.h"

namespace aiscale::sweep {
namespace {

TEST(SweepStatistics, SpreadIsMedianMinMax) {
  Spread s = spread_of({3.0, 1.0, 2.0, 10.0});
  EXPECT_DOUBLE_EQ(s.median, 2.5);
  EXPECT_DOUBLE_EQ(s.min, 1.0);
  EXPECT_DOUBLE_EQ(s.max, 10.0);
  EXPECT_DOUBLE_EQ(spread_of({}).median, 0.0);
}

TEST(SweepStatistics, SpeedupAndEfficiency) {
  // T(1) = 10 s, T(4) = 4 s: S = 2.5, E = 2.5 / 4.
  EXPECT_DOUBLE_EQ(speedup(10, 4), 2.5);
  EXPECT_DOUBLE_EQ(strong_efficiency(10, 1, 4, 4), 0.625);
  // From n0 = 2: T(2) = 6, T(4) = 4: S = 1.5, E = 1.5 * 2 / 4 = 0.75.
  EXPECT_DOUBLE_EQ(strong_efficiency(6, 2, 4, 4), 0.75);
  // Weak: 100 -> 90 tokens/s per device: e = 0.9, scaled speedup 0.9 * 4 = 3.6.
  EXPECT_DOUBLE_EQ(throughput_ratio(100, 90), 0.9);
  EXPECT_DOUBLE_EQ(weak_speedup(100, 1, 90, 4), 3.6);
}

TEST(SweepStatistics, FlopsAndMfu) {
  EXPECT_DOUBLE_EQ(tflops(1e6, 6e6), 6.0);
  EXPECT_DOUBLE_EQ(*mfu(100, 400), 0.25);
  EXPECT_FALSE(mfu(100, 0).has_value());
}

TEST(SweepStatistics, AmdahlFitOfExactLaw) {
  // T(n) = 10 * (0.2 + 0.8 / n): 10, 6, 4.
  auto f = fit_amdahl({1, 2, 4}, {10, 6, 4});
  ASSERT_TRUE(f.has_value());
  EXPECT_NEAR(f->serial_fraction, 0.2, 1e-12);
  EXPECT_NEAR(f->t1, 10.0, 1e-12);
  EXPECT_NEAR(f->residual_rms, 0.0, 1e-12);
}

TEST(SweepStatistics, AmdahlFitWithResidual) {
  // Times 10, 6, 5 at n = 1, 2, 4: least squares of T = a + b/n gives b = 48/7, a = 3,
  // so f = 3 / (3 + 48/7) = 7/23; residuals 1/7, -3/7, 2/7: rms = sqrt(2/21).
  auto f = fit_amdahl({1, 2, 4}, {10, 6, 5});
  ASSERT_TRUE(f.has_value());
  EXPECT_NEAR(f->serial_fraction, 7.0 / 23.0, 1e-12);
  EXPECT_NEAR(f->residual_rms, std::sqrt(2.0 / 21.0), 1e-12);
  EXPECT_NEAR(f->residual_rms_relative, std::sqrt(2.0 / 21.0) / 7.0, 1e-12);
  EXPECT_FALSE(fit_amdahl({2, 2}, {1, 1}).has_value());
}

TEST(SweepStatistics, Stragglers) {
  // Median of ranks (1.0, 1.0, 1.2, 1.04) = 1.02: rank 2 is 1.2/1.02 - 1 = 17.6% slower;
  // rank 3 only 2%.
  auto s = find_stragglers({1.0, 1.0, 1.2, 1.04});
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].rank, 2);
  EXPECT_NEAR(s[0].slower_by, 1.2 / 1.02 - 1, 1e-12);
  EXPECT_EQ(find_stragglers({1.0, 1.0, 1.2, 1.04}, 0.2).size(), 0u);
}

// Two ranks, six steps in two epochs of three; step 1 is warm-up.
RunRecords two_rank_records() {
  RunRecords r;
  const double t0[] = {5.0, 1.0, 1.5, 1.2, 1.1, 2.0};
  const double t1[] = {5.0, 1.4, 1.0, 1.3, 1.0, 2.0};
  for (int s = 1; s <= 6; ++s)
    for (int rank = 0; rank < 2; ++rank) {
      StepRow row;
      row.rank = rank;
      row.step = s;
      row.epoch = (s - 1) / 3;
      row.step_time_s = rank == 0 ? t0[s - 1] : t1[s - 1];
      row.sync_s = rank == 0 ? 0.5 : 0.1;
      row.tokens = 256;
      row.samples = 4;
      row.loss = 10.0 - s;
      row.first_in_epoch = (s - 1) % 3 == 0;
      row.last_in_epoch = s % 3 == 0;
      row.warmup = s == 1;
      r.steps.push_back(row);
    }
  r.epochs = {{0, 1, 3, 8.0, 7.5, 0.5, true}, {1, 4, 6, 5.0, 4.3, 0.7, true}};
  r.world = 2;
  return r;
}

TEST(SweepStatistics, MeasuredStepsLeaveOutWarmupAndEpochEdges) {
  RunRecords r = two_rank_records();
  Window w;  // all steps
  // Steps 2 and 5 are neither warm-up nor an epoch's first or last batch; the slowest
  // rank's time counts: max(1.0, 1.4) and max(1.1, 1.0).
  EXPECT_EQ(global_step_times(r, w), (std::vector<double>{1.4, 1.1}));
  w.leave_out_epoch_edges = false;
  EXPECT_EQ(global_step_times(r, w), (std::vector<double>{1.4, 1.5, 1.3, 1.1, 2.0}));
  w.epoch = 1;
  EXPECT_EQ(global_step_times(r, w), (std::vector<double>{1.3, 1.1, 2.0}));
  Window steps;
  steps.first_step = 3;
  steps.last_step = 4;
  steps.leave_out_epoch_edges = false;
  EXPECT_EQ(global_step_times(r, steps), (std::vector<double>{1.5, 1.3}));
  EXPECT_EQ(tokens_per_rank_step(r, steps), 256);
  EXPECT_EQ(samples_per_rank_step(r, steps), 4);
}

TEST(SweepStatistics, RankBusyTimesSubtractSync) {
  RunRecords r = two_rank_records();
  Window w;
  w.leave_out_epoch_edges = false;
  // Rank 0, steps 2-6: 1.0 1.5 1.2 1.1 2.0 minus 0.5 -> median 0.7; rank 1: 1.4 1.0 1.3
  // 1.0 2.0 minus 0.1 -> median 1.2.
  auto m = rank_median_busy_times(r, w);
  ASSERT_EQ(m.size(), 2u);
  EXPECT_NEAR(m[0], 0.7, 1e-12);
  EXPECT_NEAR(m[1], 1.2, 1e-12);
}

TEST(SweepStatistics, EpochThroughputPerDevice) {
  RunRecords r = two_rank_records();
  Window w;
  w.epoch = 1;
  // Epoch 1: 3 steps x 4 samples per rank = 12 samples in 5.0 s wall, 4.3 s training.
  EXPECT_NEAR(*epoch_throughput_per_device(r, w, "wall"), 12.0 / 5.0, 1e-12);
  EXPECT_NEAR(*epoch_throughput_per_device(r, w, "train"), 12.0 / 4.3, 1e-12);
  Window both;  // steps 1..6 hold both epochs: 24 samples in 13 s
  EXPECT_NEAR(*epoch_throughput_per_device(r, both, "wall"), 24.0 / 13.0, 1e-12);
  Window part;
  part.first_step = 2;
  EXPECT_NEAR(*epoch_throughput_per_device(r, part, "wall"), 12.0 / 5.0, 1e-12);
  part.last_step = 5;
  EXPECT_FALSE(epoch_throughput_per_device(r, part, "wall").has_value());
}

TEST(SweepStatistics, ReadsStepRecordsAndSkipsACutLastLine) {
  auto dir = testsupport::temp_dir("steps-read");
  const auto path = (dir / "steps.jsonl").string();
  std::ofstream(path) << R"({"rank":0,"step":1,"epoch":0,"step_time_s":0.5,"data_wait_s":0.1,"tokens":8,"samples":2,"loss":3,"first_in_epoch":true,"last_in_epoch":false,"warmup":true})" "\n"
                      << R"({"rank":1,"step":1,"epoch":0,"step_time_s":0.6,"data_wait_s":0.1,"tokens":8,"samples":2,"loss":3,"first_in_epoch":true,"last_in_epoch":false,"warmup":true})" "\n"
                      << R"({"event":"epoch","epoch":0,"first_step":1,"last_step":1,"wall_s":2,"train_s":1.1,"val_s":0.5,"complete":true})" "\n"
                      << R"({"event":"memory","rank":0,"peak_memory_bytes":100})" "\n"
                      << R"({"rank":0,"step":2,"ep)";
  RunRecords r = read_step_records(path);
  EXPECT_EQ(r.steps.size(), 2u);
  EXPECT_EQ(r.world, 2);
  ASSERT_EQ(r.epochs.size(), 1u);
  EXPECT_DOUBLE_EQ(r.epochs[0].val_s, 0.5);
  EXPECT_EQ(r.events.size(), 1u);
  EXPECT_DOUBLE_EQ(r.steps[1].step_time_s, 0.6);
  EXPECT_THROW(read_step_records((dir / "missing.jsonl").string()), Error);
}

}  // namespace
}  // namespace aiscale::sweep
