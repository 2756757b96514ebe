// The utilisation curve against the per-GPU GEMM size: fitted from a measured sweep over
// micro-batch and width (bench/gpu/calibrate_planner.sh writes it), and the sweep's own
// points predicted from the fit.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "aiscale/plan/planner.h"

namespace aiscale::plan {
namespace {

const std::string kFixtures = std::string(AISCALE_SOURCE_DIR) + "/tests/plan/fixtures/";

const Catalog& catalog() {
  static const Catalog cat = load_catalog(std::string(AISCALE_SOURCE_DIR) + "/data/systems",
                                          {kFixtures + "gpuhost_2xh100.toml"});
  return cat;
}

// A bench language line for GPT-2 124M at `batch` whose utilisation follows the curve.
std::string line(int batch, double u_max, double half, double step_s) {
  const double x = batch * 1024.0 * 768;
  const double u = u_max * x / (x + half);
  // achieved = u × 989.5 TFLOP/s; the calibration takes the AdamW estimate out of the step.
  nlohmann::json j = {{"benchmark", "language"}, {"model", "gpt2-124m"}, {"n_params", 124439808},
                      {"n_layer", 12}, {"n_head", 12}, {"n_embd", 768}, {"vocab_size", 50257},
                      {"seq", 1024}, {"batch", batch}, {"world_size", 1}, {"precision", "bf16"},
                      {"recompute", false}, {"device_kind", "gpu"}, {"device", "NVIDIA H100 80GB HBM3"},
                      {"achieved_tflops_per_device", u * 989.5}};
  (void)step_s;
  return j.dump();
}

TEST(PlanGemmCurve, FitRecoversTheCurveOfASweep) {
  const std::string file = ::testing::TempDir() + "/sweep.jsonl";
  {
    std::ofstream f(file);
    for (int b : {1, 2, 4, 8, 16}) f << line(b, 0.52, 2.0e6, 0) << "\n";
  }
  const Calibration cal = load_calibration({file}, catalog());
  const auto fit = fit_gemm_curve(cal, "H100-SXM5-80GB", Precision::bf16);
  ASSERT_TRUE(fit);
  EXPECT_NEAR(fit->u_max, 0.52, 1e-6);
  EXPECT_NEAR(fit->half_elements, 2.0e6, 1.0);
  EXPECT_EQ(fit->samples, 5);
  // The planner uses it: measured, and micro-batch 1 slower per token than 16.
  const Target t = catalog().resolve("gpuhost-h100")[0];
  const MachineFigures m = machine_figures(t, make_workload("gpt2-124m"), Precision::bf16, cal,
                                           catalog(), Assumptions{});
  EXPECT_TRUE(m.gemm_half_elements.measured);
  EXPECT_NEAR(utilisation_at(m, 1024.0 * 768, Assumptions{}), 0.52 * 786432 / (786432 + 2.0e6), 1e-6);
  // One shape only: no fit, the assumption stays.
  const std::string one = ::testing::TempDir() + "/one.jsonl";
  {
    std::ofstream f(one);
    f << line(16, 0.5, 1e6, 0) << "\n" << line(16, 0.5, 1e6, 0) << "\n";
  }
  EXPECT_FALSE(fit_gemm_curve(load_calibration({one}, catalog()), "H100-SXM5-80GB", Precision::bf16));
  // A GPT-2 and a Llama run of other sizes are two families, not a sweep: no curve through
  // them for either family (such a fit measured the families' difference and made a Llama
  // step 44 % too long), while the GPT-2 sweep keeps its own beside a Llama run.
  const std::string mixed = ::testing::TempDir() + "/mixed.jsonl";
  {
    nlohmann::json llama = nlohmann::json::parse(line(16, 0.6, 1e6, 0));
    llama["model"] = "llama3-1b-shape";
    llama["family"] = "llama";
    llama["n_embd"] = 2048;
    std::ofstream f(mixed);
    f << line(8, 0.5, 1e6, 0) << "\n" << llama.dump() << "\n";
  }
  const Calibration both = load_calibration({mixed}, catalog());
  EXPECT_FALSE(fit_gemm_curve(both, "H100-SXM5-80GB", Precision::bf16, "gpt2"));
  EXPECT_FALSE(fit_gemm_curve(both, "H100-SXM5-80GB", Precision::bf16, "llama"));
  {
    std::ofstream f(mixed, std::ios::app);
    nlohmann::json llama = nlohmann::json::parse(line(16, 0.6, 1e6, 0));
    llama["family"] = "llama";
    f << llama.dump() << "\n";
  }
  std::ofstream(file, std::ios::app) << std::ifstream(mixed).rdbuf();
  const auto gpt = fit_gemm_curve(load_calibration({file}, catalog()), "H100-SXM5-80GB", Precision::bf16, "gpt2");
  ASSERT_TRUE(gpt);
  EXPECT_EQ(gpt->samples, 6);  // the sweep's five and the mixed file's GPT-2 run
}

// The sweep a GPU host recorded (bench/gpu/calibrate_planner.sh): each of its points is
// predicted from the curve fitted to all of them, within ±10 % (GPT-2 350M at micro-batch
// 1, 4 and 16 among them). Skipped until such a file is committed.
TEST(PlanGemmCurve, RecordedSweepPointsWithinTenPercent) {
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(kFixtures))
    if (e.path().filename().string().rfind("calibration_sweep", 0) == 0) files.push_back(e.path().string());
  if (files.empty()) GTEST_SKIP() << "no tests/plan/fixtures/calibration_sweep*.jsonl recorded yet";
  for (const auto& file : files) {
    const Catalog cat = load_catalog(std::string(AISCALE_SOURCE_DIR) + "/data/systems",
                                     {kFixtures + "gpuhost_2xh100.toml", kFixtures + "gpuhost_2xh200.toml"});
    const Calibration cal = load_calibration({file}, cat);
    ASSERT_FALSE(cal.utilisation.empty()) << file;
    std::ifstream in(file);
    std::string text;
    int checked = 0;
    while (std::getline(in, text)) {
      const auto j = nlohmann::json::parse(text);
      if (j.value("benchmark", "") != "language" || j.value("world_size", 1) != 1) continue;
      const std::string system = match_device(cat, j["device"].get<std::string>()) == "H100-SXM5-80GB"
                                     ? "gpuhost-h100" : "gpuhost";
      ModelOverrides mo;
      mo.n_layer = j["n_layer"].get<int64_t>();
      mo.n_head = j["n_head"].get<int64_t>();
      mo.n_embd = j["n_embd"].get<int64_t>();
      mo.seq_len = j["seq"].get<int64_t>();
      PlanRequest r;
      r.workload = make_workload("custom", mo);
      r.tokens = 1e9;
      r.precision = parse_precision(j["precision"].get<std::string>());
      r.gpus = 1;
      r.global_batch = j["batch"].get<long>();
      r.pins.micro_batch = static_cast<int>(r.global_batch);
      const PlanResult res = plan(r, cat.resolve(system), cat, cal, Assumptions{});
      ASSERT_EQ(res.ranked.size(), 1u) << text;
      const double measured = j["step_time_median_s"].get<double>();
      const double e = res.ranked[0].step.step_s / measured - 1.0;
      EXPECT_LT(std::fabs(e), 0.10) << file << ": " << j.value("model", "") << " batch " << r.global_batch
                                    << " predicted " << res.ranked[0].step.step_s << " s, measured " << measured;
      // The table of docs/guide/planner.md ("Utilisation").
      std::printf("| %lld × %lld (width %lld) | %s | %lld | %.2f ms | %.2f ms | %+.1f%% |\n",
                  static_cast<long long>(*mo.n_layer), static_cast<long long>(*mo.n_head),
                  static_cast<long long>(*mo.n_embd), j["precision"].get<std::string>().c_str(),
                  static_cast<long long>(r.global_batch), res.ranked[0].step.step_s * 1e3,
                  measured * 1e3, e * 100);
      ++checked;
    }
    EXPECT_GE(checked, 5) << file;
  }
}

}  // namespace
}  // namespace aiscale::plan

namespace aiscale::plan {
namespace {

// Out of sample: the curve fitted to the H100 sweep without GPT-2 350M predicts 350M at
// micro-batch 1, 4 and 16 within ±10 %.
TEST(PlanGemmCurve, Gpt2MediumPredictedFromTheOtherWidths) {
  const std::string sweep = kFixtures + "calibration_sweep_h100.jsonl";
  if (!std::filesystem::exists(sweep)) GTEST_SKIP() << "no H100 sweep recorded";
  const std::string held_out = ::testing::TempDir() + "/sweep_without_350m.jsonl";
  std::map<long, double> measured;  // micro-batch -> step
  {
    std::ifstream in(sweep);
    std::ofstream out(held_out);
    std::string text;
    while (std::getline(in, text)) {
      const auto j = nlohmann::json::parse(text);
      if (j.value("model", "") == "gpt2-350m") {
        measured[j["batch"].get<long>()] = j["step_time_median_s"].get<double>();
        continue;
      }
      out << text << "\n";
    }
  }
  ASSERT_EQ(measured.size(), 5u);
  const Calibration cal = load_calibration({held_out}, catalog());
  for (long b : {1L, 4L, 16L}) {
    PlanRequest r;
    r.workload = make_workload("gpt2-350m");
    r.tokens = 1e9;
    r.gpus = 1;
    r.global_batch = b;
    r.pins.micro_batch = static_cast<int>(b);
    const PlanResult res = plan(r, catalog().resolve("gpuhost-h100"), catalog(), cal, Assumptions{});
    ASSERT_EQ(res.ranked.size(), 1u);
    ASSERT_TRUE(res.ranked[0].figures.gemm_half_elements.measured);
    const double e = res.ranked[0].step.step_s / measured[b] - 1.0;
    std::printf("| gpt2-350m, micro-batch %ld, fitted without 350M | %.2f ms | %.2f ms | %+.1f%% |\n", b,
                res.ranked[0].step.step_s * 1e3, measured[b] * 1e3, e * 100);
    EXPECT_LT(std::fabs(e), 0.10) << "micro-batch " << b;
  }
}

}  // namespace
}  // namespace aiscale::plan
