// `aiscale bench language` on the CPU: one JSON record with the fields docs/guide/bench.md lists,
// consistent with each other (tokens/s against the step time, FLOP/s against FLOPs per
// token), also appended to --output.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "../support/run_support.h"

namespace aiscale {
namespace {

using namespace testsupport;

TEST(BenchLanguage, CpuRecordHasConsistentFields) {
  auto dir = temp_dir("bench-language");
  const fs::path out = dir / "lang.jsonl";
  auto r = run_aiscale("bench language --model gpt-tiny --batch 2 --seq 32 --steps 3 --warmup 1 "
                       "--threads 1 --output " + out.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // The record is the last line of stdout (progress goes to stderr) and the file's one line.
  const std::string text = read_bytes(out);
  ASSERT_FALSE(text.empty()) << r.output;
  const nlohmann::json j = nlohmann::json::parse(text.substr(0, text.find('\n')));
  EXPECT_EQ(j["benchmark"], "language");
  EXPECT_EQ(j["model"], "gpt-tiny");
  EXPECT_EQ(j["device_kind"], "cpu");
  EXPECT_EQ(j["attention"], "cpu");
  EXPECT_EQ(j["precision"], "fp32");
  EXPECT_EQ(j["world_size"], 1);
  EXPECT_EQ(j["batch"], 2);
  EXPECT_EQ(j["seq"], 32);
  EXPECT_EQ(j["steps_timed"], 3);
  const double tps = j["tokens_per_s"], step = j["step_time_median_s"];
  ASSERT_GT(tps, 0.0);
  ASSERT_GT(step, 0.0);
  EXPECT_GE(double(j["step_time_p90_s"]), step);
  // Every timed step, and its spread, consistent with the median.
  ASSERT_EQ(j["step_times_s"].size(), 3u) << text;
  const double lo = j["step_time_min_s"], hi = j["step_time_max_s"], mean = j["step_time_mean_s"];
  EXPECT_LE(lo, step);
  EXPECT_LE(step, hi);
  EXPECT_LE(lo, mean);
  EXPECT_LE(mean, hi);
  EXPECT_GE(double(j["step_time_stddev_s"]), 0.0);
  double sum = 0;
  for (double t : j["step_times_s"]) sum += t;
  EXPECT_NEAR(sum / 3.0, mean, 1e-12 + 1e-9 * mean);
  // tokens/s from the median step: 2 x 32 tokens per step (within the spread of steps).
  EXPECT_NEAR(tps * step / 64.0, 1.0, 0.5);
  const double fpt = j["flops_per_token"], tflops = j["achieved_tflops_per_device"];
  EXPECT_GT(fpt, 6.0 * double(j["n_params"]));
  EXPECT_NEAR(tflops, tps * fpt / 1e12, 1e-9 + 1e-6 * tflops);
  EXPECT_NE(r.output.find("\"attention\":\"cpu\""), std::string::npos) << r.output;
}

TEST(BenchLanguage, GpuAttentionChoiceIsRefusedOnTheCpu) {
  auto r = run_aiscale("bench language --model gpt-tiny --batch 2 --seq 32 --steps 1 --warmup 0 "
                       "--attention flash");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("--attention"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("\"auto\""), std::string::npos) << r.output;
  r = run_aiscale("bench language --model gpt-tiny --attention xformers");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("xformers"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace aiscale
