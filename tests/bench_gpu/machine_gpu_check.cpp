// `aiscale bench machine --quick` on the GPU: the CUDA figures are there and plausible.
// Exits 77 (skipped) where no GPU is visible.
#include <gtest/gtest.h>

#include "../support/run_support.h"
#include "aiscale/parallel/bootstrap.h"
#include "aiscale/plan/machine_profile.h"

using namespace aiscale;
using namespace aiscale::testsupport;

TEST(BenchMachineGpu, QuickProfileIsPlausible) {
  const auto dir = temp_dir("bench-machine-gpu");
  const std::string path = (dir / "m.toml").string();
  auto r = run_aiscale("bench machine --device cuda --quick --output " + path);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const plan::MachineProfile p = plan::load_machine_profile(path);
  EXPECT_EQ(p.device_kind, "gpu");
  EXPECT_FALSE(p.gpu.empty());
  EXPECT_GE(p.gpu_count, 1);
  EXPECT_GT(p.gpu_memory_gib, 1);
  for (const char* prec : {"fp32", "tf32", "bf16", "fp16"}) {
    EXPECT_GT(p.gemm_peak_tflops.at(prec), 0) << prec;
    EXPECT_GT(p.gemm_model_tflops.at(prec), 0) << prec;
  }
  // Tensor cores: 16-bit and TF32 GEMMs beat plain FP32 on every GPU aiscale targets.
  EXPECT_GT(p.gemm_peak_tflops.at("bf16"), 2 * p.gemm_peak_tflops.at("fp32"));
  EXPECT_GT(p.gemm_peak_tflops.at("tf32"), p.gemm_peak_tflops.at("fp32"));
  // Device memory is far faster than the host link (PCIe, or C2C on Grace Hopper).
  EXPECT_GT(p.device_triad_gbs, 2 * p.h2d_pinned_gbs);
  EXPECT_GT(p.device_copy_gbs, 2 * p.d2h_pinned_gbs);
  EXPECT_GT(p.h2d_pinned_gbs, 0);
  EXPECT_GT(p.h2d_pageable_gbs, 0);
  EXPECT_EQ(p.peers.size(), size_t(p.gpu_count) * size_t(p.gpu_count - 1));
  for (const auto& e : p.peers) EXPECT_GT(e.gbs, 0) << e.src << "->" << e.dst;
}

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (parallel::cuda_visible_gpus() == 0) {
    std::printf("no GPU visible: skipped\n");
    return 77;
  }
  return RUN_ALL_TESTS();
}
