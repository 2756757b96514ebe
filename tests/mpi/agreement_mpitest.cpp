// Ranks started with different configurations stop at once, naming the differing keys,
// instead of training with a wrong global batch or crashing inside MPI.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>

#include "../support/run_support.h"

using namespace aiscale::testsupport;

namespace {

// mpirun's MPMD form: one rank per program, each with its own --set values.
std::string two_ranks(const std::string& args0, const std::string& args1) {
  std::string mpirun = "mpirun --oversubscribe --bind-to none -x OMP_NUM_THREADS=1";
  if (::geteuid() == 0) mpirun += " --allow-run-as-root";
  const std::string bin = AISCALE_BINARY;
  return "timeout 120 " + mpirun + " -np 1 " + bin + " " + args0 + " : -np 1 " + bin + " " + args1;
}

TEST(RankAgreement, DifferentSetValuesStopEveryRankNamingTheKey) {
  fs::path dir = temp_dir("agreement");
  write_byte_shards(dir, 20000, 2000);
  const std::string cfg = tiny_config(dir);
  const std::string common = "train -q -c " + cfg + " --set run.name=differ train.steps=5";
  auto start = std::chrono::steady_clock::now();
  auto r = run_command(two_ranks(common + " train.batch_size=4", common + " train.batch_size=8"));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.exit_code, 124) << r.output;  // not left to time out
  EXPECT_NE(r.output.find("rank 1 was started with another configuration than rank 0"),
            std::string::npos) << r.output;
  EXPECT_NE(r.output.find("train.batch_size: rank 0 has 4, this rank 8"), std::string::npos)
      << r.output;
  EXPECT_LT(seconds, 60.0) << r.output;
  EXPECT_FALSE(fs::exists(dir / "runs/differ/metrics.jsonl") &&
               !read_metrics(dir / "runs/differ").empty());
  // The same values on both ranks train.
  r = run_command(two_ranks(common + " run.name=same", common + " run.name=same"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  fs::remove_all(dir);
}

}  // namespace
