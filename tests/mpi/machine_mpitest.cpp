// `aiscale bench machine` on 2 MPI ranks (aiscale launch): the profile gains the ranks'
// all-reduce bus bandwidth.
#include <gtest/gtest.h>

#include "../support/run_support.h"
#include "aiscale/plan/machine_profile.h"

using namespace aiscale;
using namespace aiscale::testsupport;

TEST(BenchMachine, TwoMpiRanksAddTheAllreduce) {
  const auto dir = temp_dir("bench-machine-mpi");
  const std::string path = (dir / "m.toml").string();
  auto r = run_aiscale("launch -n 2 --threads-per-rank 1 -- bench machine --device cpu --quick "
                       "--model gpt-mini --seq 16 --max-size 64 --stream-mib 1 --allreduce-bytes "
                       "1048576 --output " + path);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const plan::MachineProfile p = plan::load_machine_profile(path);
  EXPECT_EQ(p.ranks, 2);
  EXPECT_EQ(p.nodes, 1);
  EXPECT_EQ(p.allreduce_backend, "mpi");
  EXPECT_EQ(p.allreduce_ranks, 2);
  EXPECT_DOUBLE_EQ(p.allreduce_bytes, 1048576);
  EXPECT_GT(p.allreduce_busbw_gbs, 0);
  EXPECT_GT(p.gemm_peak_tflops.at("fp32"), 0);
  EXPECT_NE(r.output.find("\"figure\":\"allreduce\""), std::string::npos) << r.output;
}

// Before any measurement, on every rank alike: an output rank 0 cannot write, and an
// all-reduce message that the ranks of this host cannot hold.
TEST(BenchMachine, TwoRanksStopBeforeMeasuringOnAnUnwritableOutputOrAnOversizedMessage) {
  auto r = run_aiscale("launch -n 2 --threads-per-rank 1 -- bench machine --device cpu --quick "
                       "--output /proc/m.toml");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("--output '/proc/m.toml': cannot create a file in folder '/proc'"),
            std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("GEMM fp"), std::string::npos) << r.output;  // nothing measured
  r = run_aiscale("launch -n 2 --threads-per-rank 1 -- bench machine --device cpu --quick "
                  "--allreduce-bytes 1099511627776");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("--allreduce-bytes 1099511627776:"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("the largest --allreduce-bytes that fits is"), std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("GEMM fp"), std::string::npos) << r.output;
}
