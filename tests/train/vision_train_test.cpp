// `aiscale train` with a vision config on synthetic images: the run directory (metrics
// with top-1/top-5, summary, checkpoints), resuming to the same losses as an uninterrupted
// run, the config's errors, and `aiscale bench vision`'s record.
#include <gtest/gtest.h>

#include <fstream>

#include "../support/run_support.h"
#include "aiscale/data/images/store_format.h"
#include "aiscale/train/vision_config.h"

namespace aiscale {
namespace {

using namespace testsupport;

std::string synthetic_config(const fs::path& dir, const std::string& name, int64_t steps) {
  const fs::path path = dir / (name + ".toml");
  std::ofstream(path) << "[model]\nkind = \"resnet\"\npreset = \"resnet-small\"\nimage_size = 8\n"
                      << "[data]\nkind = \"synthetic\"\nsynthetic_images = 256\n"
                      << "synthetic_channels = 1\nsynthetic_classes = 4\n"
                      << "[train]\nbatch_size = 16\nsteps = " << steps
                      << "\nlr = 0.8\nwarmup_epochs = 0.25\nnesterov = true\nthreads = 1\n"
                      << "log_every = 1\n"
                      << "[run]\ndir = \"" << dir.string() << "\"\nname = \"" << name
                      << "\"\ncheckpoint_every = 10\n";
  return path.string();
}

TEST(VisionTrain, SyntheticRunWritesMetricsAccuracyAndCheckpoints) {
  const fs::path dir = temp_dir("vision-train");
  const RunOutput r = run_aiscale("train -q -c " + synthetic_config(dir, "full", 24),
                                  "OMP_WAIT_POLICY=passive");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const fs::path run = dir / "full";
  for (const char* f : {"config.toml", "metrics.jsonl", "steps.jsonl", "summary.json"})
    EXPECT_TRUE(fs::exists(run / f)) << f;
  EXPECT_TRUE(fs::exists(run / "checkpoints/step_00000024/COMPLETE"));
  EXPECT_TRUE(fs::exists(run / "checkpoints/step_00000020/model.safetensors"));
  const auto metrics = read_metrics(run);
  ASSERT_GE(metrics.size(), 24u);
  EXPECT_TRUE(metrics[0].contains("top1") && metrics[0].contains("top5"));
  // 16 images an epoch (256 / 16): the end of each epoch has a validation pass.
  EXPECT_TRUE(metrics[15].contains("val_top1")) << metrics[15].dump();
  const auto summary = nlohmann::json::parse(std::ifstream(run / "summary.json"));
  EXPECT_EQ(summary["kind"], "resnet");
  EXPECT_EQ(summary["steps"], 24);
  // The linear scaling rule: 0.8 x 16 / 256.
  EXPECT_DOUBLE_EQ(summary["peak_lr"].get<double>(), 0.05);
  EXPECT_LT(summary["final_loss"].get<double>(), 0.5 * summary["first_loss"].get<double>());
  EXPECT_GE(summary["val_top1"].get<double>(), 0.9);
  EXPECT_GE(summary["val_top5"].get<double>(), summary["val_top1"].get<double>());

  // Resume from step 20: the remaining steps repeat the uninterrupted run's losses.
  fs::remove_all(run / "checkpoints/step_00000024");
  const RunOutput again = run_aiscale("train -q --resume " + run.string(),
                                      "OMP_WAIT_POLICY=passive");
  ASSERT_EQ(again.exit_code, 0) << again.output;
  const auto resumed = read_metrics(run);
  ASSERT_GE(resumed.size(), 24u);
  for (size_t i = 20; i < 24; ++i) {
    EXPECT_NEAR(resumed[i]["loss"].get<double>(), metrics[i]["loss"].get<double>(), 1e-6)
        << "step " << i + 1;
  }
}

// SIGTERM (here injected after step 9, as the signal handler would flag it) finishes the
// step, writes a complete checkpoint of that step and exits cleanly; resuming repeats the
// uninterrupted run's losses.
TEST(VisionTrain, SigtermWritesACheckpointAndResumes) {
  const fs::path dir = temp_dir("vision-sigterm");
  const RunOutput straight = run_aiscale("train -q -c " + synthetic_config(dir, "straight", 14),
                                         "OMP_WAIT_POLICY=passive");
  ASSERT_EQ(straight.exit_code, 0) << straight.output;
  const RunOutput stopped = run_aiscale("train -q -c " + synthetic_config(dir, "stopped", 14),
                                        "OMP_WAIT_POLICY=passive AISCALE_FAULT=term@9");
  ASSERT_EQ(stopped.exit_code, 0) << stopped.output;
  EXPECT_NE(stopped.output.find("stopped by signal after step 9"), std::string::npos)
      << stopped.output;
  const fs::path run = dir / "stopped";
  EXPECT_TRUE(fs::exists(run / "checkpoints/step_00000009/COMPLETE"));
  EXPECT_FALSE(fs::exists(run / "checkpoints/step_00000010"));
  const auto summary = nlohmann::json::parse(std::ifstream(run / "summary.json"));
  EXPECT_EQ(summary["status"], "interrupted");
  EXPECT_EQ(summary["steps"], 9);
  EXPECT_EQ(nlohmann::json::parse(std::ifstream(dir / "straight/summary.json"))["status"],
            "finished");

  const RunOutput resumed = run_aiscale("train -q --resume " + run.string(),
                                        "OMP_WAIT_POLICY=passive");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  const auto a = read_metrics(dir / "straight"), b = read_metrics(run);
  ASSERT_GE(b.size(), 14u);
  for (size_t i = 9; i < 14; ++i)
    EXPECT_NEAR(b[i]["loss"].get<double>(), a[i]["loss"].get<double>(), 1e-6) << "step " << i + 1;
}

// 32 raw 8x8 grey images of two classes (bright and dark); record 5 holds too few bytes.
std::string store_with_a_corrupt_record(const fs::path& dir) {
  data::ImageStoreWriter writer((dir / "store").string(), 1 << 20);
  for (int i = 0; i < 32; ++i) {
    const int label = i % 2;
    std::vector<uint8_t> px(i == 5 ? 10 : 64);
    for (size_t p = 0; p < px.size(); ++p) px[p] = uint8_t(label ? 40 + p % 7 : 200 - p % 5);
    writer.add({label, data::ImageEncoding::raw, 1, 8, 8}, px.data(), px.size());
  }
  data::ImageStoreMeta meta;
  meta.classes = 2;
  meta.class_names = {"bright", "dark"};
  meta.channels = 1;
  meta.height = meta.width = 8;
  meta.mean = {0.5f};
  meta.std = {0.3f};
  writer.finish(meta);
  return (dir / "store").string();
}

// A corrupt record stops the run at once, naming the store, the record and the option; with
// data.skip_corrupt = true the run trains, warns once and counts the skipped records in
// summary.json (one epoch of 8 steps meets record 5 once; the validation pass once).
TEST(VisionTrain, CorruptRecordStopsTheRunUnlessSkippedAndTheSkipsAreCounted) {
  const fs::path dir = temp_dir("vision-corrupt");
  const std::string store = store_with_a_corrupt_record(dir);
  const fs::path config = dir / "corrupt.toml";
  std::ofstream(config) << "[model]\nkind = \"resnet\"\npreset = \"resnet-small\"\n"
                        << "[data]\nkind = \"lmdb\"\ntrain = \"" << store << "\"\nval = \""
                        << store << "\"\nloader_threads = 2\n"
                        << "[train]\nbatch_size = 4\nsteps = 8\nthreads = 1\n"
                        << "[run]\ndir = \"" << dir.string() << "\"\n";
  const RunOutput strict = run_aiscale("train -q -c " + config.string() + " --set run.name=strict",
                                       "OMP_WAIT_POLICY=passive");
  EXPECT_EQ(strict.exit_code, 1) << strict.output;
  EXPECT_NE(strict.output.find("record 5 (LMDB key 0x0000000000000005)"), std::string::npos)
      << strict.output;
  EXPECT_NE(strict.output.find(store), std::string::npos) << strict.output;
  EXPECT_NE(strict.output.find("skip such records with data.skip_corrupt = true"), std::string::npos) << strict.output;
  EXPECT_FALSE(fs::exists(dir / "strict/summary.json"));

  const RunOutput skipping = run_aiscale("train -q -c " + config.string() +
                                             " --set run.name=skipping data.skip_corrupt=true",
                                         "OMP_WAIT_POLICY=passive");
  ASSERT_EQ(skipping.exit_code, 0) << skipping.output;
  EXPECT_NE(skipping.output.find("record 5 (LMDB key 0x0000000000000005)"), std::string::npos)
      << skipping.output;
  const auto summary = nlohmann::json::parse(std::ifstream(dir / "skipping/summary.json"));
  EXPECT_EQ(summary["skipped_corrupt"]["train"], 1) << summary.dump();
  EXPECT_EQ(summary["skipped_corrupt"]["val"], 1) << summary.dump();
  EXPECT_NE(skipping.output.find("1 training image(s) and 1 image(s) of the last validation"),
            std::string::npos) << skipping.output;
}

TEST(VisionTrain, ConfigErrorsNameTheKey) {
  EXPECT_TRUE(train::is_vision_config("[model]\nkind = \"resnet\"\n", {}));
  EXPECT_TRUE(train::is_vision_config("[model]\npreset = \"resnet50\"\n", {}));
  EXPECT_FALSE(train::is_vision_config("[model]\npreset = \"gpt-mini\"\n", {}));
  const std::string base = "[model]\nkind = \"resnet\"\n[data]\nkind = \"synthetic\"\n";
  auto error_of = [](const std::string& text, std::vector<std::string> overrides = {}) {
    try {
      train::parse_vision_config(text, "test.toml", overrides);
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error_of(base + "[train]\nseq_len = 64\n").find("unknown vision config key 'train.seq_len'"),
            std::string::npos);
  EXPECT_NE(error_of(base, {"train.schedule=wavy"}).find("choose one of cosine, step, constant"),
            std::string::npos);
  EXPECT_NE(error_of("[model]\nkind = \"resnet\"\n[data]\nkind = \"lmdb\"\n").find("data.train"),
            std::string::npos);
  EXPECT_NE(error_of(base, {"train.momentum=1.5"}).find("train.momentum"), std::string::npos);
  // Where the value came from: the --set, or file:line; beyond 64 bits is out of range.
  std::string e = error_of(base, {"data.stage=nowhere"});
  EXPECT_EQ(e.rfind("--set data.stage=nowhere: data.stage = \"nowhere\"", 0), 0u) << e;
  e = error_of(base + "[train]\nbatch_size = 0\n");
  EXPECT_EQ(e.rfind("test.toml:6: config key 'train.batch_size' = 0 is too small", 0), 0u) << e;
  e = error_of(base + "[train]\nbatch_size = 99999999999999999999\n");
  EXPECT_NE(e.find("test.toml:6: train.batch_size = 99999999999999999999 is out of range: it must be a "
                   "whole number between"), std::string::npos) << e;
  e = error_of(base, {"train.batch_size=99999999999999999999"});
  EXPECT_NE(e.find("--set train.batch_size=99999999999999999999: config key 'train.batch_size' = "
                   "99999999999999999999 is out of range"), std::string::npos) << e;
  const auto c = train::parse_vision_config(base, "test.toml", {"train.batch_size=64"});
  EXPECT_EQ(c.batch_size, 64);
  // The resolved config reads back to the same values.
  const auto again = train::parse_vision_config(train::to_toml(c), "resolved.toml", {});
  EXPECT_EQ(train::to_toml(again), train::to_toml(c));
}

TEST(VisionBench, PrintsOneRecord) {
  const RunOutput r = run_aiscale(
      "bench vision --model resnet-small --image-size 12 --batch-size 4 --steps 2 --warmup 1 "
      "--threads 1", "OMP_WAIT_POLICY=passive");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output.substr(r.output.find('{')));
  EXPECT_EQ(j["bench"], "vision");
  EXPECT_EQ(j["model"], "resnet-small");
  EXPECT_EQ(j["batch_size"], 4);
  EXPECT_GT(j["images_per_s"].get<double>(), 0.0);
  EXPECT_GT(j["achieved_flops"].get<double>(), 0.0);
  EXPECT_EQ(j["parameters"], 174970);
}

}  // namespace
}  // namespace aiscale
