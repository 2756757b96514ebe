// The NVML power meter where it cannot measure: without NVML (CI), outside a CUDA run, or
// for a GPU NVML does not have, it says why, measures nothing and never fails the
// benchmark. The GPU host's test (tests/gpu2, BenchLanguageReportsGpuPower) checks the
// figures it measures.
#include <gtest/gtest.h>

#include "aiscale/profile/gpu_power.h"
#include "../support/run_support.h"

namespace aiscale {
namespace {

TEST(GpuPower, UnknownGpuIsReportedNotMeasured) {
  for (const std::string id : {"", "0000:ff:1f.7"}) {
    profile::GpuPowerMeter meter(id);
    EXPECT_FALSE(meter.available()) << id;
    EXPECT_FALSE(meter.unavailable_reason().empty()) << id;
    // A window on a meter that cannot measure is empty, not an error.
    meter.start();
    const profile::GpuPowerWindow w = meter.stop();
    EXPECT_EQ(w.energy_j, 0.0);
    EXPECT_EQ(w.clock_samples, 0);
  }
  // The empty id names the reason: no GPU (or no NVML at all).
  profile::GpuPowerMeter none("");
  const std::string& why = none.unavailable_reason();
  EXPECT_TRUE(why.find("not a CUDA run") != std::string::npos ||
              why.find("NVML") != std::string::npos) << why;
}

TEST(GpuPower, CpuBenchHasNoPowerRecord) {
  auto r = testsupport::run_aiscale("bench language --model gpt-tiny --batch 1 --seq 16 --steps 1 "
                                    "--warmup 0 --threads 1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("gpu_power"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace aiscale
