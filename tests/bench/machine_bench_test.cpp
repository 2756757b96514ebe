// `aiscale bench machine` on the CPU: the model's GEMM shapes, and a quick run whose
// profile the loader reads back with positive figures.
#include <gtest/gtest.h>

#include <sstream>

#include <nlohmann/json.hpp>

#include "../support/run_support.h"
#include "aiscale/bench/machine.h"
#include "aiscale/core/error.h"
#include "aiscale/plan/machine_profile.h"

namespace aiscale {
namespace {
using testsupport::run_aiscale;
using testsupport::temp_dir;

TEST(BenchMachine, GptStepGemmsCoverEveryLinearLayerThreeTimes) {
  const auto shapes = bench::gpt_step_gemms("gpt2-124m", 2, 64);
  ASSERT_EQ(shapes.size(), 15u);  // 5 linear layers x (forward, input gradient, weight gradient)
  const double N = 2 * 64, C = 768, L = 12, V = 50257;
  double flops = 0;
  for (const auto& s : shapes) flops += s.flops() * double(s.count);
  // 3 GEMMs of 2 FLOPs per multiply-add over every weight, for every token.
  EXPECT_DOUBLE_EQ(flops, 6.0 * N * (L * 12.0 * C * C + C * V));
  EXPECT_EQ(shapes[0].name, "qkv.fwd");
  EXPECT_EQ(shapes[0].n, 3 * 768);
  EXPECT_TRUE(shapes[0].trans_b);
  // The CUDA model's padded vocabulary: 50257 -> 50304.
  EXPECT_EQ(bench::gpt_step_gemms("gpt2-124m", 2, 64, 128).at(12).n, 50304);
  EXPECT_THROW(bench::gpt_step_gemms("gpt2-124m", 1, 4096), Error);  // beyond the context
  EXPECT_THROW(bench::gpt_step_gemms("nosuchmodel", 1, 64), Error);
}

TEST(BenchMachine, QuickCpuRunWritesAProfileTheLoaderReads) {
  const auto dir = temp_dir("bench-machine");
  const std::string path = (dir / "machine-profile.toml").string();
  const auto r = run_aiscale("bench machine --device cpu --quick --threads 1 --seq 16 --max-size 128 "
                             "--stream-mib 2 --output " + path);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // One JSON line per figure, all of benchmark "machine".
  std::istringstream in(r.output);
  std::string line;
  int records = 0;
  bool identity = false;
  while (std::getline(in, line))
    if (!line.empty() && line.front() == '{') {
      const auto j = nlohmann::json::parse(line);
      EXPECT_EQ(j["benchmark"], "machine");
      identity = identity || j["figure"] == "identity";
      ++records;
    }
  EXPECT_TRUE(identity) << r.output;
  EXPECT_GE(records, 20) << r.output;
  EXPECT_NE(r.output.find("bench machine: profile written to"), std::string::npos) << r.output;

  const plan::MachineProfile p = plan::load_machine_profile(path);
  EXPECT_EQ(p.device_kind, "cpu");
  EXPECT_EQ(p.threads, 1);
  EXPECT_EQ(p.ranks, 1);
  EXPECT_NE(p.command.find("bench machine --device cpu --quick"), std::string::npos) << p.command;
  EXPECT_FALSE(p.host.empty());
  for (const char* prec : {"fp32", "fp64"}) EXPECT_GT(p.gemm_peak_tflops.at(prec), 0) << prec;
  EXPECT_EQ(p.shapes_model, "gpt2-124m");
  EXPECT_EQ(p.shapes_seq, 16);
  EXPECT_GT(p.gemm_model_tflops.at("fp32"), 0);
  EXPECT_EQ(p.shapes.size(), 15u);
  EXPECT_GT(p.host_copy_gbs, 0);
  EXPECT_GT(p.host_triad_gbs, 0);
  EXPECT_EQ(p.allreduce_ranks, 0);  // one rank: no all-reduce
}

TEST(BenchMachine, BadOptionsFailBeforeMeasuring) {
  const auto dir = temp_dir("bench-machine-bad");
  auto r = run_aiscale("bench machine --device cpu --quick --output " + (dir / "nofolder" / "m.toml").string());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("does not exist"), std::string::npos) << r.output;
  r = run_aiscale("bench machine --device cpu --quick --model nosuchmodel");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.output.find("GEMM fp"), std::string::npos) << r.output;  // nothing measured first
}

}  // namespace
}  // namespace aiscale
