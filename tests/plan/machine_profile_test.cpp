// Machine profiles: the TOML written by `aiscale bench machine`, read back with clear
// errors for bad files, and used by the planner in place of datasheet figures.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "../support/run_support.h"
#include "aiscale/core/error.h"
#include "aiscale/plan/machine_profile.h"

namespace aiscale {
namespace {
using namespace plan;
using testsupport::run_aiscale;
using testsupport::temp_dir;

// A GPU profile as `bench machine` would write it on an A100 64GB node (Leonardo's GPUs).
MachineProfile a100_profile() {
  MachineProfile p;
  p.host = "lrdn0001";
  p.date = "2026-11-26T19:00:00Z";
  p.aiscale_version = "0.1.0";
  p.command = "aiscale bench machine --output m.toml";
  p.device_kind = "gpu";
  p.cpu = "Intel(R) Xeon(R) Platinum 8358 CPU @ 2.60GHz";
  p.cpu_cores = 32;
  p.threads = 32;
  p.gpu = "NVIDIA A100-SXM-64GB";
  p.gpu_count = 4;
  p.gpu_memory_gib = 63.4;
  p.driver = "12.2";
  p.ranks = 4;
  p.gemm_peak_tflops = {{"fp32", 19.1}, {"tf32", 140.2}, {"bf16", 280.5}, {"fp16", 282.0}};
  p.gemm_peak_size = 8192;
  p.shapes_model = "gpt2-124m";
  p.shapes_batch = 16;
  p.shapes_seq = 1024;
  p.gemm_model_tflops = {{"bf16", 240.0}, {"fp32", 18.0}};
  p.shapes.push_back({"qkv.fwd", "bf16", 16384, 2304, 768, 12, 210.0});
  p.host_copy_gbs = 80;
  p.host_triad_gbs = 90;
  p.device_copy_gbs = 1500;
  p.device_triad_gbs = 1550;
  p.h2d_pinned_gbs = 24;
  p.d2h_pinned_gbs = 25;
  p.h2d_pageable_gbs = 10;
  p.d2h_pageable_gbs = 9;
  p.p2p_enabled = true;
  p.peers = {{0, 1, true, 80.0}, {1, 0, true, 79.0}};
  p.allreduce_backend = "nccl";
  p.allreduce_ranks = 4;
  p.allreduce_bytes = 268435456;
  p.allreduce_busbw_gbs = 70.5;
  return p;
}

std::string write(const std::filesystem::path& dir, const std::string& name, const std::string& text) {
  std::ofstream(dir / name) << text;
  return (dir / name).string();
}

std::string error_of(const std::string& path) {
  try {
    load_machine_profile(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string replaced(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

TEST(MachineProfile, WrittenAndReadBack) {
  const auto dir = temp_dir("profile-roundtrip");
  const std::string path = (dir / "m.toml").string();
  write_machine_profile(path, a100_profile());
  const MachineProfile p = load_machine_profile(path);
  EXPECT_EQ(p.file, path);
  EXPECT_EQ(p.gpu, "NVIDIA A100-SXM-64GB");
  EXPECT_EQ(p.command, "aiscale bench machine --output m.toml");
  EXPECT_DOUBLE_EQ(p.gemm_peak_tflops.at("bf16"), 280.5);
  EXPECT_DOUBLE_EQ(p.gemm_model_tflops.at("bf16"), 240.0);
  ASSERT_EQ(p.shapes.size(), 1u);
  EXPECT_EQ(p.shapes[0].m, 16384);
  EXPECT_EQ(p.shapes[0].count, 12);
  EXPECT_DOUBLE_EQ(p.device_triad_gbs, 1550);
  EXPECT_DOUBLE_EQ(p.d2h_pageable_gbs, 9);
  ASSERT_EQ(p.peers.size(), 2u);
  EXPECT_DOUBLE_EQ(p.p2p_min_gbs(), 79.0);
  EXPECT_TRUE(p.p2p_enabled);
  EXPECT_DOUBLE_EQ(p.allreduce_busbw_gbs, 70.5);
  EXPECT_EQ(p.allreduce_ranks, 4);
  EXPECT_NE(p.label().find("lrdn0001"), std::string::npos);
}

TEST(MachineProfile, BadFilesFailNamingFileAndKey) {
  const auto dir = temp_dir("profile-bad");
  EXPECT_NE(error_of((dir / "absent.toml").string()).find("does not exist"), std::string::npos);
  const std::string good = machine_profile_toml(a100_profile());

  std::string e = error_of(write(dir, "broken.toml", "format = \"aiscale-machine-profile\"\n[machine\n"));
  EXPECT_NE(e.find("broken.toml"), std::string::npos) << e;
  EXPECT_NE(e.find("not valid TOML"), std::string::npos) << e;

  e = error_of(write(dir, "negative.toml", replaced(good, "bf16 = 280.5", "bf16 = -280.5")));
  EXPECT_NE(e.find("gemm_peak_tflops.bf16"), std::string::npos) << e;
  EXPECT_NE(e.find("must be positive"), std::string::npos) << e;

  e = error_of(write(dir, "zero.toml", replaced(good, "device_triad = 1550", "device_triad = 0")));
  EXPECT_NE(e.find("memory_gbs.device_triad"), std::string::npos) << e;

  e = error_of(write(dir, "unknown.toml", replaced(good, "host_copy = 80", "host_copy = 80\nhost_cpoy = 81")));
  EXPECT_NE(e.find("unknown key 'memory_gbs.host_cpoy'"), std::string::npos) << e;

  e = error_of(write(dir, "missing.toml", replaced(good, "host = \"lrdn0001\"\n", "")));
  EXPECT_NE(e.find("missing key 'machine.host'"), std::string::npos) << e;

  e = error_of(write(dir, "format.toml", replaced(good, "aiscale-machine-profile", "something-else")));
  EXPECT_NE(e.find("format is 'something-else'"), std::string::npos) << e;

  e = error_of(write(dir, "type.toml", replaced(good, "ranks = 4\nnodes", "ranks = \"four\"\nnodes")));
  EXPECT_NE(e.find("'machine.ranks'"), std::string::npos) << e;
}

double step_s(const nlohmann::json& plan) { return plan["ranked"][0]["step"]["step_s"].get<double>(); }

// The JSON document of a run's output (stderr's warnings come first).
nlohmann::json json_of(const std::string& output) {
  return nlohmann::json::parse(output.substr(std::min(output.find('{'), output.size())));
}

TEST(MachineProfile, PlanUsesTheProfileAndNamesIt) {
  const auto dir = temp_dir("profile-plan");
  const std::string path = (dir / "a100.toml").string();
  write_machine_profile(path, a100_profile());
  const std::string plan = "plan --model gpt2-124m --tokens 1e9 --system leonardo --gpus 4 --json";
  auto base = run_aiscale(plan);
  ASSERT_EQ(base.exit_code, 0) << base.output;
  auto with = run_aiscale(plan + " --machine-profile " + path);
  ASSERT_EQ(with.exit_code, 0) << with.output;
  const auto b = json_of(base.output), w = json_of(with.output);
  // 240 TFLOP/s at the model's shapes × 65% (50% of the 312 TFLOP/s peak) against the
  // datasheet's assumed 45%.
  EXPECT_LT(step_s(w), step_s(b) * 0.99) << w.dump(1);
  const auto& f = w["ranked"][0]["figures"];
  EXPECT_NEAR(f["utilisation"]["value"].get<double>(), 240.0 * kStepShareOfGemm / 312.0, 1e-3);
  for (const char* k : {"utilisation", "intra_node_bytes_per_s", "hbm_bytes_per_s"}) {
    EXPECT_TRUE(f[k]["measured"].get<bool>()) << k;
    EXPECT_NE(f[k]["source"].get<std::string>().find("machine profile " + path + " (lrdn0001, "),
              std::string::npos) << f[k].dump();
  }
  EXPECT_NEAR(f["intra_node_bytes_per_s"]["value"].get<double>(), 70.5e9, 1);
  EXPECT_NEAR(f["hbm_bytes_per_s"]["value"].get<double>(), 1550e9, 1);
  EXPECT_FALSE(b["ranked"][0]["figures"]["utilisation"]["measured"].get<bool>());
  // The explained text names the source beside each figure.
  auto text = run_aiscale("plan --model gpt2-124m --tokens 1e9 --system leonardo --gpus 4 --explain "
                          "--machine-profile " + path);
  ASSERT_EQ(text.exit_code, 0) << text.output;
  EXPECT_NE(text.output.find("machine profile " + path), std::string::npos) << text.output;
}

TEST(MachineProfile, ProfileOfAnotherAcceleratorIsWarnedAboutAndNotUsed) {
  const auto dir = temp_dir("profile-other");
  MachineProfile h100 = a100_profile();
  h100.gpu = "NVIDIA H100 80GB HBM3";
  const std::string path = (dir / "h100.toml").string();
  write_machine_profile(path, h100);
  const std::string plan = "plan --model gpt2-124m --tokens 1e9 --system leonardo --gpus 4 --json";
  auto base = run_aiscale(plan);
  auto with = run_aiscale(plan + " --machine-profile " + path);
  ASSERT_EQ(with.exit_code, 0) << with.output;
  EXPECT_DOUBLE_EQ(step_s(json_of(with.output)), step_s(json_of(base.output)));
  EXPECT_NE(with.output.find("warning"), std::string::npos) << with.output;
  auto text = run_aiscale("plan --model gpt2-124m --tokens 1e9 --system leonardo --gpus 4 --machine-profile " + path);
  ASSERT_EQ(text.exit_code, 0) << text.output;
  EXPECT_NE(text.output.find("not used for leonardo/booster: it was measured on GPU 'NVIDIA H100 80GB "
                             "HBM3' (H100-SXM5-80GB), not Leonardo Booster's A100-SXM4-64GB"),
            std::string::npos) << text.output;
  auto missing = run_aiscale(plan + " --machine-profile " + (dir / "absent.toml").string());
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.output.find("does not exist"), std::string::npos) << missing.output;
}

}  // namespace
}  // namespace aiscale
