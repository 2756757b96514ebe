// The MPI communicator's ring and hierarchical all-reduce against MPI's own on 2, 3 and 4
// ranks (allreduce_algorithm_ranks.cpp, started here through mpirun), and
// `aiscale bench allreduce --algorithm` on 2 ranks.
#include <gtest/gtest.h>
#include <unistd.h>

#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "../support/run_support.h"

using namespace aiscale::testsupport;

namespace {

void expect_checks_pass(int ranks, int per_node) {
  std::string cmd = "mpirun -np " + std::to_string(ranks) +
                    " --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 ";
  if (::geteuid() == 0) cmd += "--allow-run-as-root ";
  auto r = run_command(cmd + AISCALE_MPI_ALLREDUCE_ALGORITHM_RANKS + " " + std::to_string(per_node));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (int rank = 0; rank < ranks; ++rank)
    EXPECT_NE(r.output.find("algorithm checks passed on rank " + std::to_string(rank)), std::string::npos)
        << r.output;
}

}  // namespace

TEST(AllreduceAlgorithmsMpi, TwoRanks) { expect_checks_pass(2, 1); }
// Two nodes of one rank and one of two: uneven.
TEST(AllreduceAlgorithmsMpi, ThreeRanksUnevenNodes) { expect_checks_pass(3, 2); }
TEST(AllreduceAlgorithmsMpi, FourRanksTwoNodes) { expect_checks_pass(4, 2); }

TEST(AllreduceAlgorithmsMpi, BenchNamesTheAlgorithmAndChecksTheSums) {
  for (const std::string algo : {"ring", "hierarchical --ranks-per-node 1"}) {
    auto r = run_aiscale("launch -n 2 --threads-per-rank 1 -- bench allreduce --backend mpi "
                         "--algorithm " + algo + " --min-bytes 4 --max-bytes 4194304 "
                         "--step-factor 8 --iters 3 --warmup 1 --repeats 1");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::istringstream in(r.output);
    std::string line;
    int rows = 0;
    while (std::getline(in, line)) {
      if (line.empty() || line.front() != '{') continue;
      auto j = nlohmann::json::parse(line);
      EXPECT_EQ(j["algorithm"], algo.substr(0, algo.find(' ')));
      EXPECT_EQ(j["correct"], true) << line;
      ++rows;
    }
    EXPECT_EQ(rows, 7) << r.output;  // 4 B .. 1 MiB by 8
  }
}

TEST(AllreduceAlgorithmsMpi, BenchRefusesNodesWithoutTheHierarchicalAlgorithm) {
  auto r = run_aiscale("bench allreduce --backend mpi --algorithm ring --ranks-per-node 2");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--algorithm hierarchical"), std::string::npos) << r.output;
  auto s = run_aiscale("bench allreduce --backend mpi --ranks-per-node 2");
  EXPECT_NE(s.exit_code, 0);
  EXPECT_NE(s.output.find("--algorithm hierarchical"), std::string::npos) << s.output;
}
