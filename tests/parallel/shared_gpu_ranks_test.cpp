// The multi-GPU tests' switch to 2 ranks sharing one GPU over MPI (tests/support/
// run_support.h, AISCALE_TEST_SHARED_GPU=1): only commands that launch several ranks are
// rewritten, to parallel.communicator = mpi, whatever communicator they named.
#include <gtest/gtest.h>

#include <string>

#include "../support/run_support.h"

using aiscale::testsupport::shared_gpu_ranks;
using aiscale::testsupport::with_shared_gpu_ranks;

namespace {

struct SharedGpuRanks {
  SharedGpuRanks() { shared_gpu_ranks() = true; }
  ~SharedGpuRanks() { shared_gpu_ranks() = false; }
};

}  // namespace

TEST(SharedGpuRanks, OffChangesNothing) {
  const std::string cmd = "launch -n 2 -- train -q -c a.toml --set parallel.communicator=nccl";
  EXPECT_EQ(with_shared_gpu_ranks(cmd), cmd);
}

TEST(SharedGpuRanks, SeveralRanksTalkMpi) {
  SharedGpuRanks on;
  EXPECT_EQ(with_shared_gpu_ranks("launch -n 2 --threads-per-rank 4 -- train -q -c a.toml --set "
                                  "run.name=x parallel.communicator=nccl parallel.zero_stage=1"),
            "launch -n 2 --threads-per-rank 4 -- train -q -c a.toml --set run.name=x "
            "parallel.communicator=mpi parallel.zero_stage=1");
  EXPECT_EQ(with_shared_gpu_ranks("launch -n 2 -- train -q --resume r --set parallel.communicator=auto"),
            "launch -n 2 -- train -q --resume r --set parallel.communicator=mpi");
  EXPECT_EQ(with_shared_gpu_ranks("launch -n 2 -- train -q -c a.toml --set run.name=x"),
            "launch -n 2 -- train -q -c a.toml --set run.name=x --set parallel.communicator=mpi");
  EXPECT_EQ(with_shared_gpu_ranks("launch -n 2 -- bench language --model gpt-tiny --output o"),
            "launch -n 2 -- bench language --model gpt-tiny --output o --communicator mpi");
  EXPECT_EQ(with_shared_gpu_ranks("launch -n 2 -- bench language --communicator nccl --pp 2"),
            "launch -n 2 -- bench language --communicator mpi --pp 2");
}

TEST(SharedGpuRanks, OneRankAndOtherCommandsStayAsTheyAre) {
  SharedGpuRanks on;
  for (const std::string cmd :
       {"train -q -c a.toml --set parallel.communicator=auto", "launch -n 1 -- train -q -c a.toml",
        "launch -n 2 -- bench allreduce --backend nccl", "bench language --model gpt-tiny"})
    EXPECT_EQ(with_shared_gpu_ranks(cmd), cmd);
}
