// Calibration from `aiscale bench` JSON Lines results.
#include <filesystem>
#include <fstream>
#include <random>

#include <gtest/gtest.h>

#include "aiscale/core/error.h"
#include "aiscale/plan/calibration.h"

namespace aiscale::plan {
namespace {
namespace fs = std::filesystem;

const Catalog& catalog() {
  static const Catalog cat = load_catalog(std::string(AISCALE_SOURCE_DIR) + "/data/systems");
  return cat;
}

std::string write_temp(const std::string& text) {
  const fs::path p = fs::temp_directory_path() /
                     ("aiscale_cal_" + std::to_string(std::random_device{}()) + ".jsonl");
  std::ofstream(p) << text;
  return p.string();
}

// Synthetic lines in the format `aiscale bench` writes; the numbers are test inputs, not
// measurements of any machine.
const char* kLines = R"({"benchmark":"language","model":"gpt2-124m","n_params":124439808,"n_layer":12,"n_embd":768,"seq":1024,"batch":16,"grad_accum":1,"world_size":1,"precision":"bf16","device":"NVIDIA A100-SXM-64GB","device_kind":"gpu","tokens_per_s":100000,"tokens_per_s_per_device":100000,"flops_per_token":800000000,"achieved_tflops_per_device":80.0,"step_time_median_s":0.16,"host":"test","date":"2000-01-01"}
{"benchmark":"language","model":"gpt2-1558m","n_params":1557611200,"precision":"bf16","device":"NVIDIA A100-SXM-64GB","device_kind":"gpu","tokens_per_s_per_device":15000,"flops_per_token":9800000000}
{"benchmark":"language","model":"gpt2-124m","n_params":124439808,"precision":"fp32","device":"cpu","device_kind":"cpu","tokens_per_s_per_device":10}

{"benchmark":"allreduce","backend":"nccl","world_size":4,"bytes":1073741824,"time_s":0.01,"algbw_GBps":100,"busbw_GBps":150,"device":"NVIDIA A100-SXM-64GB"}
{"benchmark":"allreduce","backend":"nccl","world_size":4,"bytes":1048576,"time_s":0.001,"algbw_GBps":10,"busbw_GBps":15,"device":"NVIDIA A100-SXM-64GB"}
{"benchmark":"allreduce","backend":"nccl","world_size":16,"bytes":1073741824,"time_s":0.1,"algbw_GBps":20,"busbw_GBps":40,"device":"NVIDIA A100-SXM-64GB","system":"leonardo"}
)";

TEST(PlanCalibration, DeviceNamesMapToAccelerators) {
  EXPECT_EQ(match_device(catalog(), "NVIDIA H100 80GB HBM3"), "H100-SXM5-80GB");
  EXPECT_EQ(match_device(catalog(), "NVIDIA A100-SXM4-40GB"), "A100-SXM4-40GB");
  EXPECT_EQ(match_device(catalog(), "NVIDIA A100-SXM-64GB"), "A100-SXM4-64GB");
  EXPECT_EQ(match_device(catalog(), "NVIDIA H100 PCIe"), "H100-PCIe-80GB");
  EXPECT_EQ(match_device(catalog(), "AMD Instinct MI250X"), "MI250X-GCD");
  EXPECT_EQ(match_device(catalog(), "Intel(R) Data Center GPU Max 1550"), "Max1550-128GB");
  EXPECT_EQ(match_device(catalog(), "Some Other GPU"), "");
}

TEST(PlanCalibration, MeasuredFiguresReplaceDatasheetGuesses) {
  const std::string file = write_temp(kLines);
  const Calibration cal = load_calibration({file}, catalog());
  fs::remove(file);
  ASSERT_EQ(cal.utilisation.size(), 2u);
  // The first line has a step time: the planner's AdamW estimate (28 bytes per parameter
  // over the A100's memory bandwidth, here its 40 GB sibling's) comes out of it.
  const double bw = catalog().find_accelerator("A100-SXM4-40GB")->memory_bandwidth_tbs * 1e12;
  const double opt = 124439808.0 * Assumptions{}.adamw_bytes_touched / bw;
  const double u0 = 80.0 / 312.0 * 0.16 / (0.16 - opt);
  EXPECT_DOUBLE_EQ(cal.utilisation[0].optimizer_s, opt);
  EXPECT_DOUBLE_EQ(cal.utilisation[0].utilisation, u0);
  // Without achieved_tflops_per_device: flops_per_token × tokens/s per device.
  EXPECT_DOUBLE_EQ(cal.utilisation[1].achieved_tflops, 9.8e9 * 15000 / 1e12);
  EXPECT_EQ(cal.bandwidth.size(), 3u);
  EXPECT_FALSE(cal.notes.empty());  // the CPU line is reported, not used

  // The closest model size wins.
  EXPECT_EQ(cal.closest_utilisation("A100-SXM4-64GB", Precision::bf16, 1500000000)->model, "gpt2-1558m");
  EXPECT_EQ(cal.closest_utilisation("A100-SXM4-64GB", Precision::bf16, 100000000)->model, "gpt2-124m");
  EXPECT_EQ(cal.closest_utilisation("A100-SXM4-64GB", Precision::fp16, 100000000), nullptr);

  const Catalog& cat = catalog();
  const Target leo = cat.resolve("leonardo")[0];
  const Workload w = make_workload("gpt2-124m");
  const MachineFigures m = machine_figures(leo, w, Precision::bf16, cal, cat, Assumptions{});
  EXPECT_TRUE(m.utilisation.measured);
  EXPECT_DOUBLE_EQ(m.utilisation.value, u0);
  EXPECT_NE(m.utilisation.source.find("AdamW estimate"), std::string::npos) << m.utilisation.source;
  EXPECT_TRUE(m.intra_bytes_per_s.measured);
  EXPECT_DOUBLE_EQ(m.intra_bytes_per_s.value, 150e9);  // the largest message
  EXPECT_TRUE(m.node_bytes_per_s.measured);
  EXPECT_DOUBLE_EQ(m.node_bytes_per_s.value, 40e9);
  EXPECT_NE(m.utilisation.source.find(":1"), std::string::npos) << m.utilisation.source;

  // A system without measurements keeps the datasheet figures, and says so.
  const MachineFigures j = machine_figures(cat.resolve("jupiter")[0], w, Precision::bf16, cal, cat, Assumptions{});
  EXPECT_FALSE(j.utilisation.measured);
  EXPECT_FALSE(j.node_bytes_per_s.measured);
  EXPECT_DOUBLE_EQ(j.node_bytes_per_s.value, 4 * 200e9 / 8 * Assumptions{}.inter_efficiency);
  EXPECT_NE(j.utilisation.source.find("assumed"), std::string::npos);
}

// A measured step includes the optimizer update, which the planner adds on its own: the
// calibrated 1-GPU prediction must give back the measured step, not the step plus the
// update once more. Under ZeRO-1 each GPU updates 1/N of the parameters.
TEST(PlanCalibration, OptimizerTimeIsTakenOutOfTheMeasuredStep) {
  const std::string file = write_temp(
      R"({"benchmark":"language","model":"gpt2-124m","n_params":124439808,"precision":"bf16","device":"NVIDIA H100 80GB HBM3","device_kind":"gpu","achieved_tflops_per_device":400.0,"step_time_median_s":0.03}
{"benchmark":"language","model":"gpt2-350m","n_params":354871296,"precision":"bf16","device":"NVIDIA H100 80GB HBM3","device_kind":"gpu","achieved_tflops_per_device":400.0,"step_time_median_s":0.05,"world_size":4,"zero_stage":1}
{"benchmark":"language","model":"gpt2-774m","n_params":774030080,"precision":"bf16","device":"NVIDIA H100 80GB HBM3","device_kind":"gpu","achieved_tflops_per_device":400.0}
)");
  const Calibration cal = load_calibration({file}, catalog());
  fs::remove(file);
  ASSERT_EQ(cal.utilisation.size(), 3u);
  const Accelerator* h100 = catalog().find_accelerator("H100-SXM5-80GB");
  ASSERT_GT(h100->memory_bandwidth_tbs, 0.0);
  const double bw = h100->memory_bandwidth_tbs * 1e12, b = Assumptions{}.adamw_bytes_touched;
  const double opt0 = 124439808.0 * b / bw, opt1 = 354871296.0 / 4 * b / bw;
  EXPECT_DOUBLE_EQ(cal.utilisation[0].optimizer_s, opt0);
  EXPECT_DOUBLE_EQ(cal.utilisation[0].achieved_tflops, 400.0 * 0.03 / (0.03 - opt0));
  EXPECT_DOUBLE_EQ(cal.utilisation[1].optimizer_s, opt1);
  EXPECT_DOUBLE_EQ(cal.utilisation[1].achieved_tflops, 400.0 * 0.05 / (0.05 - opt1));
  // Without a step time nothing is taken out.
  EXPECT_EQ(cal.utilisation[2].optimizer_s, 0.0);
  EXPECT_DOUBLE_EQ(cal.utilisation[2].achieved_tflops, 400.0);
}

TEST(PlanCalibration, RecomputationIsCountedAsWork) {
  const std::string file = write_temp(
      R"({"benchmark":"language","model":"gpt2-124m","n_params":124439808,"precision":"bf16","recompute":"full","device":"NVIDIA H100 80GB HBM3","device_kind":"gpu","achieved_tflops_per_device":300.0}
{"benchmark":"language","model":"gpt2-124m","n_params":124439808,"precision":"int4","device":"NVIDIA H100 80GB HBM3","device_kind":"gpu","achieved_tflops_per_device":300.0}
)");
  const Calibration cal = load_calibration({file}, catalog());
  fs::remove(file);
  ASSERT_EQ(cal.utilisation.size(), 1u);
  EXPECT_DOUBLE_EQ(cal.utilisation[0].achieved_tflops, 400.0);  // one extra forward: × 4/3
  EXPECT_EQ(cal.notes.size(), 1u);  // the unknown precision is reported, not fatal
}

TEST(PlanCalibration, CopyEngineSlowdownFromAMeasuredRun) {
  // tests/plan/fixtures/h200x2_copy_engine.jsonl: aiscale's own bench lines of one run on
  // 2x H200 (docs/results/multi-gpu.md, 2026-11-26 10:00 UTC, commit e5488fb): 1 GPU
  // 28.66 ms, 2 GPUs over the copy engines 29.74 ms with that 1-GPU rate as baseline.
  const std::string fixtures = std::string(AISCALE_SOURCE_DIR) + "/tests/plan/fixtures/";
  const Catalog cat = load_catalog(std::string(AISCALE_SOURCE_DIR) + "/data/systems",
                                   {fixtures + "gpuhost_2xh200.toml"});
  const Calibration cal = load_calibration({fixtures + "h200x2_copy_engine.jsonl"}, cat);
  ASSERT_EQ(cal.copy_engine.size(), 1u);
  const CopyEngineSample& s = cal.copy_engine[0];
  EXPECT_EQ(s.world_size, 2);
  EXPECT_NEAR(s.baseline_s, 16 * 1024 / 571601.345670419, 1e-12);
  const Workload w = make_workload("gpt2-124m");
  const Assumptions a;
  const MachineFigures m = machine_figures(cat.resolve("gpuhost").at(0), w, Precision::bf16, cal, cat, a);
  ASSERT_TRUE(m.copy_engine_slowdown.measured) << m.copy_engine_slowdown.source;
  // By hand: AdamW 124,439,808 x 28 B over 4.8 TB/s; the last 25 MiB bucket's ring
  // all-reduce over 2 GPUs at the intra-node figure; the rest of the 2-GPU step's excess
  // over the 1-GPU compute, less the wait for the slower of 2 ranks (the step spread × the
  // 1-GPU step × E[max of 2 normals] = 0.564).
  const double adamw = 124439808.0 * a.adamw_bytes_touched / 4.8e12;
  const double tail = 2 * a.alpha_intra_s + a.bucket_bytes / m.intra_bytes_per_s.value;
  const double straggler = a.step_spread_gpu * s.baseline_s * 0.5641895835;
  const double expected = (s.step_s - s.baseline_s - tail - straggler) / (s.baseline_s - adamw);
  EXPECT_NEAR(m.copy_engine_slowdown.value, expected, 1e-6);
  EXPECT_GT(m.copy_engine_slowdown.value, 0.03);
  EXPECT_LT(m.copy_engine_slowdown.value, 0.04);
  // ZeRO-1 or accumulation, or no baseline: noted, not used for the slowdown.
  const std::string file = write_temp(
      R"({"benchmark":"language","model":"gpt2-124m","n_params":124439808,"seq":1024,"batch":16,"grad_accum":1,"world_size":2,"zero_stage":1,"grad_transport":"copy-engine","precision":"bf16","device":"NVIDIA H200","device_kind":"gpu","tokens_per_s_per_device":500000,"flops_per_token":859885056,"step_time_median_s":0.0328,"baseline_tokens_per_s":520000})"
      "\n");
  const Calibration zero = load_calibration({file}, cat);
  fs::remove(file);
  EXPECT_TRUE(zero.copy_engine.empty());
  ASSERT_FALSE(zero.notes.empty());
  EXPECT_NE(zero.notes.back().find("not used for it"), std::string::npos) << zero.notes.back();
}

TEST(PlanCalibration, OneGpuRunsComeBeforeMultiGpuRuns) {
  // A 2-GPU step holds its communication, which the model prices on its own: a 1-GPU run
  // of another size is preferred to it, and it stands in (saying so) only when alone.
  // Synthetic lines: test inputs, not measurements.
  const std::string two =
      R"({"benchmark":"language","model":"gpt2-124m","n_params":124439808,"world_size":2,"precision":"bf16","device":"NVIDIA A100-SXM-64GB","device_kind":"gpu","achieved_tflops_per_device":70.0})"
      "\n";
  const std::string one =
      R"({"benchmark":"language","model":"gpt2-350m","n_params":354823168,"world_size":1,"precision":"bf16","device":"NVIDIA A100-SXM-64GB","device_kind":"gpu","achieved_tflops_per_device":90.0})"
      "\n";
  const std::string both_file = write_temp(two + one), two_file = write_temp(two);
  const Calibration both = load_calibration({both_file}, catalog());
  const Calibration alone = load_calibration({two_file}, catalog());
  fs::remove(both_file);
  fs::remove(two_file);
  const MfuSample* s = both.closest_utilisation("A100-SXM4-64GB", Precision::bf16, 124439808);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->world_size, 1);
  EXPECT_EQ(s->model, "gpt2-350m");
  s = alone.closest_utilisation("A100-SXM4-64GB", Precision::bf16, 124439808);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->world_size, 2);
  const MachineFigures m = machine_figures(catalog().resolve("leonardo/booster").at(0),
                                           make_workload("gpt2-124m"), Precision::bf16, alone,
                                           catalog(), Assumptions{});
  EXPECT_TRUE(m.utilisation.measured);
  EXPECT_NE(m.utilisation.source.find("2-GPU run"), std::string::npos) << m.utilisation.source;
}

TEST(PlanCalibration, TransformersAreCalibratedByTheirOwnFamilyFirst) {
  // A Llama's wider MLP and larger vocabulary run at another utilisation than a GPT-2 of
  // its size: a Llama run calibrates the Llama family even where a GPT-2 run is closer in
  // size, GPT-2 keeps its own, and without a Llama run the GPT-2 one stands in. A result
  // without "family" (written before the bench reported it) takes it from the model name.
  // Synthetic lines: test inputs, not measurements.
  const std::string gpt =
      R"({"benchmark":"language","model":"gpt2-1558m","n_params":1557611200,"world_size":1,"precision":"bf16","device":"NVIDIA A100-SXM-64GB","device_kind":"gpu","achieved_tflops_per_device":100.0})"
      "\n";
  const std::string llama =
      R"({"benchmark":"language","model":"llama3-8b-shape","family":"llama","n_params":8030261248,"world_size":1,"precision":"bf16","device":"NVIDIA A100-SXM-64GB","device_kind":"gpu","achieved_tflops_per_device":150.0})"
      "\n";
  const std::string old_llama =
      R"({"benchmark":"language","model":"llama3-1b-shape","n_params":1498482688,"world_size":1,"precision":"bf16","device":"NVIDIA A100-SXM-64GB","device_kind":"gpu","achieved_tflops_per_device":140.0})"
      "\n";
  const std::string both_file = write_temp(gpt + llama), gpt_file = write_temp(gpt),
                    old_file = write_temp(gpt + old_llama);
  const Calibration both = load_calibration({both_file}, catalog());
  const Calibration gpt_only = load_calibration({gpt_file}, catalog());
  const Calibration old = load_calibration({old_file}, catalog());
  for (const auto& f : {both_file, gpt_file, old_file}) fs::remove(f);
  const int64_t n = 1498482688;  // closer to the GPT-2 run's size than to the 8B's
  const MfuSample* s = both.closest_utilisation("A100-SXM4-64GB", Precision::bf16, n, false, "llama");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->model, "llama3-8b-shape");
  s = both.closest_utilisation("A100-SXM4-64GB", Precision::bf16, n, false, "gpt2");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->model, "gpt2-1558m");
  s = gpt_only.closest_utilisation("A100-SXM4-64GB", Precision::bf16, n, false, "llama");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->model, "gpt2-1558m");
  s = old.closest_utilisation("A100-SXM4-64GB", Precision::bf16, 8030261248, false, "llama");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->family, "llama");
  EXPECT_EQ(s->model, "llama3-1b-shape");
  // The planner's figures for a Llama plan come from the Llama run.
  const MachineFigures m = machine_figures(catalog().resolve("leonardo/booster").at(0),
                                           make_workload("llama3-1b-shape"), Precision::bf16,
                                           both, catalog(), Assumptions{});
  EXPECT_NE(m.utilisation.source.find("llama3-8b-shape"), std::string::npos) << m.utilisation.source;
}

// `aiscale bench vision` records calibrate the CNN family only: a GPT on the same card keeps
// its own (datasheet) figure, and a language record never stands in for a CNN.
TEST(PlanCalibration, VisionRecordsCalibrateCnnsOnly) {
  const std::string file = write_temp(
      R"({"bench":"vision","model":"resnet50","parameters":25557032,"device":"cuda","gpu":"NVIDIA A100-SXM-64GB","precision":"bf16","tf32":false,"world_size":1,"train_flops_per_image":24535105536.0,"images_per_s_per_rank":2000,"step_time_median_s":0.128}
{"bench":"vision","model":"resnet50","parameters":25557032,"device":"cpu","precision":"fp32","world_size":1,"train_flops_per_image":24535105536.0,"images_per_s_per_rank":5}
{"benchmark":"language","model":"gpt2-124m","n_params":124439808,"precision":"bf16","device":"NVIDIA A100-SXM-64GB","device_kind":"gpu","tokens_per_s_per_device":100000,"flops_per_token":800000000}
)");
  const Calibration cal = load_calibration({file}, catalog());
  fs::remove(file);
  ASSERT_EQ(cal.utilisation.size(), 2u);
  const MfuSample* cnn = cal.closest_utilisation("A100-SXM4-64GB", Precision::bf16, 25557032, true);
  ASSERT_NE(cnn, nullptr);
  EXPECT_TRUE(cnn->cnn);
  // 24.5 GFLOP × 2000 images/s over the A100's 312 TFLOP/s bf16.
  EXPECT_NEAR(cnn->utilisation, 24535105536.0 * 2000 / 312e12, 1e-12);
  const MfuSample* gpt = cal.closest_utilisation("A100-SXM4-64GB", Precision::bf16, 25557032, false);
  ASSERT_NE(gpt, nullptr);
  EXPECT_FALSE(gpt->cnn);
  EXPECT_EQ(gpt->model, "gpt2-124m");
  ASSERT_FALSE(cal.notes.empty());
  EXPECT_NE(cal.notes.back().find("CPU vision result"), std::string::npos) << cal.notes.back();
}

TEST(PlanCalibration, BadFilesAreExplained) {
  const std::string bad = write_temp("{\"benchmark\":\"language\", oops\n");
  try {
    load_calibration({bad}, catalog());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(":1: not valid JSON"), std::string::npos) << e.what();
  }
  fs::remove(bad);
  const std::string missing = write_temp("{\"benchmark\":\"language\",\"device\":\"NVIDIA H100 80GB HBM3\"}\n");
  EXPECT_THROW(load_calibration({missing}, catalog()), Error);
  fs::remove(missing);
  const std::string impossible = write_temp(
      "{\"benchmark\":\"language\",\"n_params\":1,\"precision\":\"bf16\",\"device\":\"NVIDIA A100-SXM4-40GB\",\"achieved_tflops_per_device\":900}\n");
  EXPECT_THROW(load_calibration({impossible}, catalog()), Error);  // above the peak
  fs::remove(impossible);
  EXPECT_THROW(load_calibration({"/nonexistent/results.jsonl"}, catalog()), Error);
}

}  // namespace
}  // namespace aiscale::plan
