// Communicator::split, ProcessGroups and the MPI-carried store on 4 MPI ranks
// (split_ranks.cpp, started here through mpirun).
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>

#include "../support/run_support.h"

using namespace aiscale::testsupport;

TEST(MpiSplit, FourRanksIntoGroups) {
  std::string cmd = "mpirun -np 4 --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 ";
  if (::geteuid() == 0) cmd += "--allow-run-as-root ";
  auto r = run_command(cmd + AISCALE_MPI_SPLIT_RANKS);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (int rank = 0; rank < 4; ++rank)
    EXPECT_NE(r.output.find("split checks passed on rank " + std::to_string(rank)), std::string::npos)
        << r.output;
}
