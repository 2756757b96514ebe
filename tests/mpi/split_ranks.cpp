// Run on 4 MPI ranks by split_mpitest.cpp: Communicator::split into 2 x 2 groups,
// ProcessGroups over two grids, and the store carried by MPI, each checked by sums that
// only the right groups give. Prints "split checks passed on rank R" per rank and exits
// non-zero when any rank saw a wrong value.
#include <cstdio>
#include <memory>
#include <string>

#include "aiscale/core/error.h"
#include "aiscale/parallel/bootstrap.h"
#include "aiscale/parallel/process_groups.h"
#include "aiscale/parallel/store.h"
#include "../support/rank_checks.h"

using namespace aiscale::parallel;
using namespace aiscale::testsupport::rank_checks;

namespace {

void check_splits(Communicator& world) {
  const int r = world.rank();
  // Rows {0, 1} and {2, 3}.
  auto row = world.split(r / 2, r);
  expect(row && row->world() == 2 && row->rank() == r % 2, "row rank/size");
  float x = static_cast<float>(r + 1);
  row->allreduce_sum(&x, 1);
  expect(x == (r < 2 ? 3.0f : 7.0f), "row float sum " + std::to_string(x));
  // Columns {0, 2} and {1, 3}, ranked backwards by the key.
  auto col = world.split(r % 2, -r);
  expect(col && col->world() == 2 && col->rank() == 1 - r / 2, "column rank/size (key order)");
  expect(sum_over(*col, 10.0 * (r + 1)) == (r % 2 == 0 ? 40.0 : 60.0), "column double sum");
  float root_value = static_cast<float>(r);
  col->broadcast(&root_value, 1, 0);  // column rank 0 is world rank 2 or 3
  expect(root_value == static_cast<float>(2 + r % 2), "column broadcast from its rank 0");
  col->barrier();
  // Only ranks 0 and 3 in a group; 1 and 2 in none.
  auto ends = world.split(r == 0 || r == 3 ? 7 : Communicator::kNoGroup, r);
  expect((r == 0 || r == 3) == (ends != nullptr), "no group gives nullptr");
  if (ends) expect(sum_over(*ends, double(r)) == 3.0, "sum over ranks 0 and 3");
  // A split of a split: each row into singletons.
  auto single = row->split(row->rank(), 0);
  expect(single && single->world() == 1 && sum_over(*single, 5.0) == 5.0, "split of a split");
}

void check_groups(Communicator& world, int dp, int tp, int pp) {
  GridOptions o;
  o.world = world.world();
  o.dp = dp;
  o.tp = tp;
  o.pp = pp;
  const ProcessGrid grid(o);
  ProcessGroups groups(world, grid);
  const int r = world.rank();
  for (Axis a : {Axis::dp, Axis::tp, Axis::pp}) {
    double expected = 0;
    for (int member : grid.group(a, r)) expected += member;
    expect(sum_over(groups.group(a), double(r)) == expected,
           std::string(axis_name(a)) + " group sum in " + grid.describe());
    expect(groups.group(a).rank() == grid.coord(r)[a], std::string(axis_name(a)) + " group rank");
  }
  const auto embedding = grid.embedding_group(r);
  expect((groups.embedding() != nullptr) == !embedding.empty(), "embedding membership");
  if (groups.embedding()) {
    double expected = 0;
    for (int member : embedding) expected += member;
    expect(sum_over(*groups.embedding(), double(r)) == expected, "embedding group sum");
  }
}

void check_store(Communicator& world) {
  auto store = make_store_over(world, 30);
  const int r = world.rank();
  store->set("rank/" + std::to_string(r), "here " + std::to_string(r));
  store->add("count", r + 1);
  store->barrier("all", world.world());
  for (int p = 0; p < world.world(); ++p)
    expect(store->get("rank/" + std::to_string(p)) == "here " + std::to_string(p), "store value");
  expect(store->get("count") == "10", "store count");
  store->barrier("done", world.world());  // rank 0's server stays until everyone has read
}

}  // namespace

int main() {
  try {
    auto world = make_mpi_communicator();
    my_rank = world->rank();
    if (world->world() != 4) {
      std::fprintf(stderr, "run me on 4 ranks (mpirun -np 4), not %d\n", world->world());
      return 2;
    }
    check_splits(*world);
    check_groups(*world, 2, 2, 1);
    check_groups(*world, 1, 2, 2);
    check_groups(*world, 1, 1, 4);  // one pipeline: embedding {0, 3}, ranks 1 and 2 outside
    check_store(*world);
    double total = failures;
    world->allreduce_sum(&total, 1);
    if (total == 0) std::printf("split checks passed on rank %d\n", my_rank);
    return total == 0 ? 0 : 1;
  } catch (const aiscale::Error& e) {
    std::fprintf(stderr, "rank %d: %s\n", my_rank, e.what());
    return 1;
  }
}
