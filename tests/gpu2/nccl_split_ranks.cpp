// Run on 2 GPU ranks by Gpu2.NcclSplitIntoGroups (through mpirun): Communicator::split of
// an NCCL communicator into a group of both ranks, singletons, a group that only rank 0
// joins, and a split of a split, each checked by sums only the right group gives. Prints
// "nccl split checks passed on rank R" per rank and exits non-zero when any rank saw a
// wrong value.
#include <cstdio>
#include <memory>
#include <string>

#include "aiscale/core/error.h"
#include "aiscale/parallel/comm.h"
#include "../support/rank_checks.h"

using namespace aiscale::parallel;
using namespace aiscale::testsupport::rank_checks;

int main() {
  try {
    CommOptions o;
    o.kind = "nccl";
    o.device = "cuda";
    o.timeout_s = 60;
    auto world = make_communicator(o);
    my_rank = world->rank();
    if (world->world() != 2) {
      std::fprintf(stderr, "run me on 2 ranks, not %d\n", world->world());
      return 2;
    }
    const int r = world->rank();
    // Both ranks, ranked backwards by the key.
    auto both = world->split(0, -r);
    expect(both && both->world() == 2 && both->rank() == 1 - r, "group of both: rank/size");
    if (both) expect(sum_over(*both, float(r + 1)) == 3.0f, "sum over both");
    // Singletons.
    auto single = world->split(r, 0);
    expect(single && single->world() == 1 && single->rank() == 0, "singleton rank/size");
    if (single) expect(sum_over(*single, 5.0f + r) == 5.0f + r, "singleton sum");
    // Only rank 0 in a group.
    auto only0 = world->split(r == 0 ? 3 : Communicator::kNoGroup, r);
    expect((r == 0) == (only0 != nullptr), "kNoGroup gives nullptr");
    // A split of a split: the pair into singletons again.
    if (both) {
      auto again = both->split(both->rank(), 0);
      expect(again && again->world() == 1 && sum_over(*again, 7.0f) == 7.0f, "split of a split");
    }
    // The world still works after its sub-groups.
    expect(sum_over(*world, 1.0f) == 2.0f, "world sum after the splits");
    float total = static_cast<float>(failures);
    world->allreduce_sum(&total, 1);
    if (total == 0) std::printf("nccl split checks passed on rank %d\n", my_rank);
    return total == 0 ? 0 : 1;
  } catch (const aiscale::Error& e) {
    std::fprintf(stderr, "rank %d: %s\n", my_rank, e.what());
    return 1;
  }
}
