#include "aiscale/parallel/process_groups.h"

#include "aiscale/core/error.h"

namespace aiscale::parallel {

ProcessGroups::ProcessGroups(Communicator& world, const ProcessGrid& grid)
    : world_(world), grid_(grid) {
  if (world.world() != grid.world())
    fail("the job has {} ranks but the parallel grid describes {} ({}): launch {} ranks or "
         "change the grid's sizes", world.world(), grid.world(), grid.describe(), grid.world());
  const int rank = world.rank();
  coord_ = grid.coord(rank);
  // The same splits in the same order on every rank (each is collective); the key is the
  // coordinate along the axis, so a group's ranks follow it.
  for (Axis a : {Axis::dp, Axis::tp, Axis::pp, Axis::cp})
    groups_[static_cast<int>(a)] = world.split(grid.group_index(a, rank), coord_[a]);
  const bool in_embedding = !grid.embedding_group(rank).empty();
  embedding_ = world.split(in_embedding ? grid.group_index(Axis::pp, rank) : Communicator::kNoGroup,
                           coord_.pp);
  for (Axis a : {Axis::dp, Axis::tp, Axis::pp, Axis::cp}) {
    const Communicator* g = groups_[static_cast<int>(a)].get();
    AISCALE_CHECK(g && g->world() == grid.size(a) && g->rank() == coord_[a],
                  "the {} group of rank {} has rank {} of {}, the grid says {} of {}", axis_name(a),
                  rank, g ? g->rank() : -1, g ? g->world() : 0, coord_[a], grid.size(a));
  }
}

// Groups before the world they were split from (their members' order does not matter).
ProcessGroups::~ProcessGroups() = default;

}  // namespace aiscale::parallel
