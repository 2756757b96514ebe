// The communicators of a process grid: the data-, tensor-, pipeline- and context-parallel
// groups of this rank, and its embedding group (first and last pipeline stage), split
// from the job's communicator. Built once, passed explicitly to whatever needs a group
// (no global default groups).
#pragma once
#include <memory>

#include "aiscale/core/non_copyable.h"
#include "aiscale/parallel/comm.h"
#include "aiscale/parallel/grid.h"

namespace aiscale::parallel {

class ProcessGroups : NonCopyable {
 public:
  // Collective over every rank of `world` (all must pass the same grid): splits it into
  // this rank's groups. `world` must outlive this object; world.world() must equal
  // grid.world(), else Error naming both. Each group ranks its members by their
  // coordinate along its axis (group(a).rank() == grid.coord(world.rank())[a]).
  ProcessGroups(Communicator& world, const ProcessGrid& grid);
  ~ProcessGroups();

  const ProcessGrid& grid() const { return grid_; }
  const GridCoord& coord() const { return coord_; }
  Communicator& world() { return world_; }
  Communicator& group(Axis a) { return *groups_[static_cast<int>(a)]; }
  Communicator& data() { return group(Axis::dp); }
  Communicator& tensor() { return group(Axis::tp); }
  Communicator& pipeline() { return group(Axis::pp); }
  Communicator& context() { return group(Axis::cp); }
  // nullptr on a rank of a middle pipeline stage.
  Communicator* embedding() { return embedding_.get(); }

 private:
  Communicator& world_;
  ProcessGrid grid_;
  GridCoord coord_;
  std::unique_ptr<Communicator> groups_[kAxes];
  std::unique_ptr<Communicator> embedding_;
};

}  // namespace aiscale::parallel
