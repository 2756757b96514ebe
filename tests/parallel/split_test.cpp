// Communicator::split and ProcessGroups on one process (the MPI version runs 4 ranks in
// tests/mpi).
#include <gtest/gtest.h>

#include "aiscale/parallel/comm.h"
#include "aiscale/parallel/process_groups.h"
#include "../support/error_of.h"

using namespace aiscale::parallel;
using aiscale::testsupport::error_of;

namespace {

// A communicator that, like the copy-engine group, has no split of its own.
class NoSplit final : public Communicator {
 public:
  int rank() const override { return 0; }
  int world() const override { return 1; }
  std::string backend() const override { return "copy-engines"; }
  void allreduce_sum(float*, int64_t) override {}
  void allreduce_sum(double*, int64_t) override {}
  void broadcast(float*, int64_t, int) override {}
  void broadcast_bytes(void*, int64_t, int) override {}
  void barrier() override {}
  void abort(int) override {}
};

}  // namespace

TEST(Split, SingleProcessGroupOfOneOrNone) {
  auto world = make_single_process();
  auto sub = world->split(3, 0);
  ASSERT_NE(sub, nullptr);
  EXPECT_EQ(sub->rank(), 0);
  EXPECT_EQ(sub->world(), 1);
  float x = 2.5f;
  sub->allreduce_sum(&x, 1);
  EXPECT_EQ(x, 2.5f);
  EXPECT_EQ(world->split(Communicator::kNoGroup, 0), nullptr);
}

TEST(Split, UnsupportedNamesTheBackend) {
  NoSplit c;
  std::string e = error_of([&] { c.split(0, 0); });
  EXPECT_NE(e.find("the copy-engines communicator cannot split"), std::string::npos) << e;
}

TEST(ProcessGroups, OneRankHasEveryGroup) {
  auto world = make_single_process();
  GridOptions o;
  const ProcessGrid grid(o);
  ProcessGroups groups(*world, grid);
  EXPECT_EQ(groups.data().world(), 1);
  EXPECT_EQ(groups.tensor().world(), 1);
  EXPECT_EQ(groups.pipeline().world(), 1);
  EXPECT_EQ(groups.context().world(), 1);
  ASSERT_NE(groups.embedding(), nullptr);
  EXPECT_EQ(groups.embedding()->world(), 1);
  EXPECT_EQ(&groups.world(), world.get());
}

TEST(ProcessGroups, GridOfAnotherSizeIsRefused) {
  auto world = make_single_process();
  GridOptions o;
  o.world = 4;
  o.tp = 2;
  std::string e = error_of([&] { ProcessGroups g(*world, ProcessGrid(o)); });
  EXPECT_NE(e.find("the job has 1 ranks but the parallel grid describes 4"), std::string::npos) << e;
}
