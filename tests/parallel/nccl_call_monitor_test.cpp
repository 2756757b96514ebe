// The monitor that bounds the calls into a blocking NCCL communicator: a call that stands
// longer than the deadline ends the process with exit code 3 and names itself; calls that
// return in time, and time between calls, do not.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "aiscale/parallel/nccl/call_monitor.h"

namespace aiscale::parallel {
namespace {

TEST(NcclCallMonitor, CallsThatReturnInTimeAndIdleTimePass) {
  NcclCallMonitor monitor(0, 2, 0.1);
  for (int i = 0; i < 5; ++i) {
    NcclCallMonitor::Scope call(&monitor, "all-reduce");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // idle: no call stands
  SUCCEED();
}

TEST(NcclCallMonitor, AStalledCallEndsTheProcessNamingIt) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        NcclCallMonitor monitor(1, 4, 0.1);
        monitor.set_rank(3, 4);
        NcclCallMonitor::Scope call(&monitor, "initialisation (connecting to the other ranks)");
        std::this_thread::sleep_for(std::chrono::seconds(5));
      },
      testing::ExitedWithCode(3),
      "rank 3 of 4: the NCCL initialisation \\(connecting to the other ranks\\) did not return "
      "within 0.1 s");
}

}  // namespace
}  // namespace aiscale::parallel
