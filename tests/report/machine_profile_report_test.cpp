// A machine profile beside a study (machine-profile.toml at the directory's top) shows as
// a table in the Markdown and HTML reports; a broken one fails naming the file.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "../support/run_support.h"
#include "aiscale/plan/machine_profile.h"

namespace aiscale {
namespace {

namespace fs = std::filesystem;
using testsupport::read_bytes;
using testsupport::run_aiscale;
using testsupport::temp_dir;

plan::MachineProfile cpu_profile() {
  plan::MachineProfile p;
  p.host = "node17";
  p.date = "2026-11-26T19:00:00Z";
  p.aiscale_version = "0.1.0";
  p.command = "aiscale bench machine --device cpu --output machine-profile.toml";
  p.device_kind = "cpu";
  p.cpu = "AMD EPYC 7763 64-Core Processor";
  p.cpu_cores = 128;
  p.threads = 128;
  p.gemm_peak_tflops = {{"fp32", 3.25}, {"fp64", 1.5}};
  p.gemm_peak_size = 2048;
  p.host_copy_gbs = 280.5;
  p.host_triad_gbs = 301.25;
  return p;
}

TEST(ReportMachineProfile, StudyFolderWithAProfileGetsItsTable) {
  const fs::path dir = temp_dir("report-machine-profile");
  fs::create_directories(dir / "study");
  fs::copy_file(std::string(AISCALE_TEST_DATA_DIR) + "/report/fixtures/weak_two_precisions.json",
                dir / "study" / "analysis.json");
  plan::write_machine_profile((dir / "study" / "machine-profile.toml").string(), cpu_profile());

  auto r = run_aiscale("report " + (dir / "study").string() + " -o " + (dir / "r.md").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string md = read_bytes(dir / "r.md");
  EXPECT_NE(md.find("Machine profile"), std::string::npos) << md;
  EXPECT_NE(md.find("dense GEMM fp32, best of sizes up to 2048"), std::string::npos) << md;
  EXPECT_NE(md.find("3.25"), std::string::npos) << md;
  EXPECT_NE(md.find("host memory, triad (128 threads)"), std::string::npos) << md;
  EXPECT_NE(md.find("node17"), std::string::npos) << md;

  r = run_aiscale("report " + (dir / "study").string() + " -o " + (dir / "r.html").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string html = read_bytes(dir / "r.html");
  EXPECT_NE(html.find("Machine profile"), std::string::npos);
  EXPECT_NE(html.find("AMD EPYC 7763 64-Core Processor"), std::string::npos);

  // Without a profile there is no such table; a broken profile is named.
  fs::remove(dir / "study" / "machine-profile.toml");
  r = run_aiscale("report " + (dir / "study").string() + " -o " + (dir / "plain.md").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(read_bytes(dir / "plain.md").find("Machine profile"), std::string::npos);
  std::ofstream(dir / "study" / "machine-profile.toml") << "format = \"aiscale-machine-profile\"\nversion = 1\n";
  r = run_aiscale("report " + (dir / "study").string() + " -o " + (dir / "broken.md").string());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("machine-profile.toml': missing key 'machine'"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace aiscale
