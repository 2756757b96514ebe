// The process grid: how a job's ranks are laid out over data (dp), tensor (tp), pipeline
// (pp) and context (cp) parallelism. A pure topology object: it maps a rank to its
// coordinates and lists the ranks of every group, without any communication, so the
// layout is unit-tested without MPI and the same on every rank. ProcessGroups
// (process_groups.h) turns it into communicators.
//
// Rank order: the `order` string lists the axes from the fastest-varying to the slowest,
// e.g. "tp-cp-dp-pp" (the default): consecutive ranks differ first in their tensor
// coordinate, so with ranks packed node by node (what mpirun, srun and torchrun do) a
// tensor group sits inside one node, where its per-layer exchanges use NVLink, and the
// pipeline stages, which exchange the least, are farthest apart.
#pragma once
#include <array>
#include <string>
#include <vector>

namespace aiscale::parallel {

enum class Axis { dp = 0, tp = 1, pp = 2, cp = 3 };
constexpr int kAxes = 4;
const char* axis_name(Axis a);  // "dp", "tp", "pp", "cp"

struct GridOptions {
  int world = 1;
  int dp = 0;  // 0: whatever is left, world / (tp * pp * cp)
  int tp = 1;
  int pp = 1;
  int cp = 1;
  std::string order = "tp-cp-dp-pp";  // fastest-varying axis first; every axis once
  // GPUs (ranks) per node, when known: then every tensor group must lie inside a node.
  // 0: unknown, not checked.
  int ranks_per_node = 0;
};

// A rank's place in the grid.
struct GridCoord {
  int dp = 0, tp = 0, pp = 0, cp = 0;
  int operator[](Axis a) const;
  int& operator[](Axis a);
  bool operator==(const GridCoord&) const = default;
};

class ProcessGrid {
 public:
  // Validates: sizes >= 1, world = dp * tp * pp * cp, order a permutation of the four
  // axes, tensor groups inside nodes. Throws Error naming the numbers and the fix.
  explicit ProcessGrid(const GridOptions& options);

  int world() const { return world_; }
  int size(Axis a) const { return sizes_[static_cast<int>(a)]; }
  const std::string& order() const { return order_text_; }

  GridCoord coord(int rank) const;
  int rank_of(const GridCoord& c) const;

  // The ranks that share every coordinate with `rank` but the one along `a` (its data,
  // tensor, pipeline or context group), ascending; a rank's index in the list is its
  // coordinate along `a`.
  std::vector<int> group(Axis a, int rank) const;
  // Every group along `a`, ordered by their index (group_index).
  std::vector<std::vector<int>> groups(Axis a) const;
  // Which of groups(a) holds `rank`: 0..world/size(a)-1 (a split's color).
  int group_index(Axis a, int rank) const;

  // The ranks holding the first and the last pipeline stage of `rank`'s pipeline (their
  // tied embedding weights are summed between them); one rank when pp = 1; empty for a
  // rank of a middle stage, which is in no embedding group.
  std::vector<int> embedding_group(int rank) const;
  std::vector<std::vector<int>> embedding_groups() const;

  // "world 8 = dp 2 x tp 2 x pp 2 (order tp-cp-dp-pp)".
  std::string describe() const;

 private:
  void check_rank(int rank) const;

  int world_ = 1;
  std::array<int, kAxes> sizes_{1, 1, 1, 1};
  std::array<Axis, kAxes> order_{};  // fastest-varying first
  std::array<int, kAxes> stride_{};  // rank distance between neighbours along each axis
  std::string order_text_;
};

}  // namespace aiscale::parallel
