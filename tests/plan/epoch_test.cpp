// Per-epoch figures (epoch.h): the partial last batch, loading the steps do not hide,
// validation, start-up; the efficiencies per batch, training part and epoch; the loader
// calibration and the options that describe the epoch.
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "aiscale/core/error.h"
#include "aiscale/plan/planner.h"
#include "aiscale/plan/report.h"

namespace aiscale::plan {
namespace {

const std::string kSystems = std::string(AISCALE_SOURCE_DIR) + "/data/systems";

EpochFigures figures(double storage_bytes_per_s, double decode, double cores) {
  EpochFigures f;
  f.storage_bytes_per_s = {storage_bytes_per_s, false, "test"};
  f.decode_per_core = {decode, false, "test"};
  f.cores_per_gpu = {cores, false, "test"};
  return f;
}

StepEstimate step_of(double samples, double step_s, double compute_s) {
  StepEstimate s;
  s.samples_per_step = samples;
  s.step_s = step_s;
  s.compute_s = compute_s;
  return s;
}

TEST(PlanEpoch, PartialBatchLoadingValidationAndStartup) {
  EpochInputs in;
  in.samples = 1050;  // 10.5 batches of 100
  in.validation_samples = 200;
  in.bytes_per_sample = 1e6;
  Layout l{4, 1, 1, 0, 25, 1, Recompute::none, GradTransport::nccl};
  // 100 MB per step over 200 MB/s: 0.5 s of reading, hidden behind the 1 s step.
  const EpochEstimate e = estimate_epoch(in, step_of(100, 1.0, 0.9), l, figures(2e8, 0, 0), 60);
  EXPECT_DOUBLE_EQ(e.steps, 11);
  EXPECT_NEAR(e.last_fraction, 0.5, 1e-12);
  EXPECT_NEAR(e.last_batch_s, 0.5, 1e-12);
  EXPECT_NEAR(e.train_steps_s, 11.0, 1e-12);
  EXPECT_NEAR(e.read_per_step_s, 0.5, 1e-12);
  EXPECT_NEAR(e.load_exposed_s, 0.5, 1e-12);  // only the first batch
  EXPECT_NEAR(e.train_part_s, 11.5, 1e-12);
  // Two validation batches, forward only: max(0.9 / 3, 0.5 s loading) each.
  EXPECT_DOUBLE_EQ(e.validation_batches, 2);
  EXPECT_NEAR(e.validation_s, 1.0, 1e-12);
  EXPECT_NEAR(e.epoch_s, 60 + 11.5 + 1.0, 1e-12);
}

TEST(PlanEpoch, DecodingSlowerThanTheStepIsExposed) {
  EpochInputs in;
  in.samples = 1000;
  in.bytes_per_sample = 1e5;
  in.decoded = true;
  Layout l{4, 1, 1, 0, 25, 1, Recompute::none, GradTransport::nccl};
  // 25 images per GPU on 2 cores at 10 images/s: 1.25 s per step against a 1 s step.
  const EpochEstimate e = estimate_epoch(in, step_of(100, 1.0, 0.9), l, figures(1e12, 10, 2), 0);
  EXPECT_NEAR(e.decode_per_step_s, 1.25, 1e-12);
  EXPECT_NEAR(e.load_per_step_s, 1.25, 1e-12);
  EXPECT_NEAR(e.load_exposed_s, 1.25 + 10 * 0.25, 1e-12);
}

PlanRequest resnet(long gpus) {
  PlanRequest r;
  r.workload = make_workload("resnet50");
  r.images = kImageNetTrainImages;
  r.epochs = 90;
  r.gpus = gpus;
  r.global_batch = 256L * gpus;
  r.pins.micro_batch = 256;
  r.include_unsupported = true;
  return r;
}

TEST(PlanEpoch, ResNetEpochOnLeonardo) {
  const Catalog cat = load_catalog(kSystems);
  const auto targets = cat.resolve("leonardo/booster");
  const Candidate one = plan(resnet(4), targets, cat, Calibration{}, Assumptions{}).ranked.at(0);
  // ImageNet: 1,281,167 images in 1,252 steps of 1,024, the last one 12% full; 50,000
  // validation images.
  EXPECT_DOUBLE_EQ(one.epoch.steps, 1252);
  EXPECT_NEAR(one.epoch.last_fraction, 1281167.0 / 1024 - 1251, 1e-9);
  EXPECT_DOUBLE_EQ(one.epoch.validation_batches, 49);
  EXPECT_GT(one.epoch.validation_s, 0);
  EXPECT_GT(one.epoch.load_per_step_s, 0);
  EXPECT_DOUBLE_EQ(one.epochs, 90);
  // The run: start-up once and 90 epochs of steps, loading and validation; each epoch
  // carries a 90th of the start-up.
  EXPECT_NEAR(one.epoch.startup_s, one.startup_s / 90, 1e-9);
  EXPECT_NEAR(one.days * 86400, 90 * one.epoch.epoch_s, 1e-6);
  EXPECT_NEAR(one.days * 86400, one.startup_s + 90 * (one.epoch.train_part_s + one.epoch.validation_s), 1e-6);
  EXPECT_FALSE(one.epoch.figures.decode_per_core.measured);
  // Weak scaling over the scaling curve: per-epoch efficiency below the per-batch one
  // (start-up grows with the nodes, the first batch and the partial last batch do not shrink).
  PlanRequest r = resnet(0);
  r.gpus = 0;
  r.global_batch = 0;
  r.pins.micro_batch.reset();
  const ScalingCurve c = scaling_curve(r, targets.at(0), 64, cat, Calibration{}, Assumptions{});
  const auto& last = c.weak.back();
  ASSERT_TRUE(last.run);
  EXPECT_GT(last.gpus, 128);
  EXPECT_LT(last.run->eff_epoch, last.run->eff_batch);
  EXPECT_LE(last.run->eff_train, last.run->eff_batch + 1e-9);
  EXPECT_DOUBLE_EQ(c.weak.front().run->eff_epoch, 1.0);
}

TEST(PlanEpoch, LoaderCalibrationAndDecodeOverride) {
  const Catalog cat = load_catalog(kSystems);
  const std::string dir = ::testing::TempDir() + "plan_epoch_loader";
  std::filesystem::create_directories(dir);
  const std::string file = dir + "/loader.jsonl";
  {
    std::ofstream out(file);
    out << R"({"benchmark":"loader","threads":1,"images_per_s":504,"images_per_s_per_thread":504})" << "\n"
        << R"({"benchmark":"loader","threads":16,"images_per_s":8046,"images_per_s_per_thread":502.9,"host":"h"})"
        << "\n";
  }
  const Calibration cal = load_calibration({file}, cat);
  ASSERT_EQ(cal.loader.size(), 1u);
  EXPECT_EQ(cal.loader[0].threads, 16);
  const auto targets = cat.resolve("leonardo/booster");
  const Candidate c = plan(resnet(4), targets, cat, cal, Assumptions{}).ranked.at(0);
  EXPECT_TRUE(c.epoch.figures.decode_per_core.measured);
  EXPECT_DOUBLE_EQ(c.epoch.figures.decode_per_core.value, 502.9);
  PlanRequest slow = resnet(4);
  slow.decode_per_core = 5.0;  // far too slow: the loading shows
  const Candidate s = plan(slow, targets, cat, cal, Assumptions{}).ranked.at(0);
  EXPECT_GT(s.epoch.load_exposed_s, 100 * c.epoch.load_exposed_s);
  EXPECT_GT(s.days, c.days);
}

TEST(PlanEpoch, TransformerEpochsAndValidationOptions) {
  const Catalog cat = load_catalog(kSystems);
  const auto targets = cat.resolve("leonardo/booster");
  PlanRequest r;
  r.workload = make_workload("gpt2-124m");
  r.tokens = 10e9;
  r.gpus = 4;
  const Candidate one_pass = plan(r, targets, cat, Calibration{}, Assumptions{}).ranked.at(0);
  EXPECT_NEAR(one_pass.epochs, 1.0, 1e-12);
  EXPECT_DOUBLE_EQ(one_pass.epoch.validation_s, 0);
  r.samples_per_epoch = 10e9 / 1024 / 4;  // four epochs
  r.validation_fraction = 0.01;
  const Candidate four = plan(r, targets, cat, Calibration{}, Assumptions{}).ranked.at(0);
  EXPECT_NEAR(four.epochs, 4.0, 1e-9);
  EXPECT_GT(four.epoch.validation_s, 0);
  EXPECT_GT(four.days, one_pass.days);
  r.validation_samples = 100;
  EXPECT_THROW(plan(r, targets, cat, Calibration{}, Assumptions{}), Error);
  // Explain and JSON carry the epoch and its efficiencies.
  r.validation_samples.reset();
  const PlanResult res = plan(r, targets, cat, Calibration{}, Assumptions{});
  const std::string text = plan_text(r, res, Calibration{}, Assumptions{}, true);
  EXPECT_NE(text.find("per training part"), std::string::npos) << text;
  EXPECT_NE(text.find("filesystem read"), std::string::npos);
  const auto j = plan_json(r, res, Calibration{}, Assumptions{});
  EXPECT_TRUE(j.dump().find("\"per_epoch\"") != std::string::npos);
}

}  // namespace
}  // namespace aiscale::plan
