#include "aiscale/parallel/grid.h"

#include <algorithm>
#include <initializer_list>
#include <optional>
#include <utility>

#include <fmt/format.h>

#include "aiscale/core/enum_names.h"
#include "aiscale/core/error.h"

namespace aiscale::parallel {
namespace {

constexpr std::array<Axis, kAxes> kAllAxes{Axis::dp, Axis::tp, Axis::pp, Axis::cp};
constexpr EnumName<Axis> kAxisNames[] = {
    {Axis::dp, "dp"}, {Axis::tp, "tp"}, {Axis::pp, "pp"}, {Axis::cp, "cp"}};

int idx(Axis a) { return static_cast<int>(a); }

std::array<Axis, kAxes> parse_order(const std::string& text) {
  std::array<Axis, kAxes> order{};
  std::array<bool, kAxes> seen{};
  int n = 0;
  size_t start = 0;
  const std::string hint = "list dp, tp, pp and cp once each, fastest-varying first, e.g. \"tp-cp-dp-pp\"";
  while (start <= text.size()) {
    const size_t dash = std::min(text.find('-', start), text.size());
    const std::string name = text.substr(start, dash - start);
    const std::optional<Axis> known = find_enum(kAxisNames, name);
    if (!known)
      fail("parallel grid order \"{}\": '{}' is not an axis: {}", text, name, hint);
    const Axis a = *known;
    if (seen[idx(a)] || n == kAxes)
      fail("parallel grid order \"{}\" names {} twice: {}", text, name, hint);
    seen[idx(a)] = true;
    order[n++] = a;
    start = dash + 1;
  }
  if (n != kAxes) {
    // Missing axes of size 1 are harmless, but say so rather than guess where they go.
    std::string missing;
    for (Axis b : kAllAxes)
      if (!seen[idx(b)]) missing += std::string(missing.empty() ? "" : ", ") + axis_name(b);
    fail("parallel grid order \"{}\" leaves out {}: {}", text, missing, hint);
  }
  return order;
}

}  // namespace

const char* axis_name(Axis a) { return enum_name(kAxisNames, a); }

int GridCoord::operator[](Axis a) const {
  switch (a) {
    case Axis::dp: return dp;
    case Axis::tp: return tp;
    case Axis::pp: return pp;
    case Axis::cp: return cp;
  }
  return 0;
}
int& GridCoord::operator[](Axis a) {
  switch (a) {
    case Axis::dp: return dp;
    case Axis::tp: return tp;
    case Axis::pp: return pp;
    case Axis::cp: return cp;
  }
  return dp;
}

ProcessGrid::ProcessGrid(const GridOptions& o) : world_(o.world), order_text_(o.order) {
  if (o.world < 1) fail("parallel grid: world size {} must be at least 1", o.world);
  for (auto [name, v] : std::initializer_list<std::pair<const char*, int>>{{"tp", o.tp}, {"pp", o.pp}, {"cp", o.cp}})
    if (v < 1) fail("parallel grid: {} = {} must be at least 1 (1: no {} parallelism)", name, v, name);
  if (o.dp < 0) fail("parallel grid: dp = {} must be at least 1 (0: the ranks that are left)", o.dp);
  const int model = o.tp * o.pp * o.cp;
  int dp = o.dp;
  if (dp == 0) {
    if (o.world % model != 0)
      fail("parallel grid: {} ranks cannot be divided into groups of tp {} x pp {} x cp {} = {} "
           "ranks: launch a multiple of {} ranks, or choose tp, pp and cp whose product divides {}",
           o.world, o.tp, o.pp, o.cp, model, model, o.world);
    dp = o.world / model;
  } else if (int64_t{dp} * model != o.world) {
    fail("parallel grid: dp {} x tp {} x pp {} x cp {} = {} ranks, but the job has {}: launch {} "
         "ranks, or set dp = 0 to use whatever the other sizes leave", dp, o.tp, o.pp, o.cp,
         int64_t{dp} * model, o.world, int64_t{dp} * model);
  }
  sizes_[idx(Axis::dp)] = dp;
  sizes_[idx(Axis::tp)] = o.tp;
  sizes_[idx(Axis::pp)] = o.pp;
  sizes_[idx(Axis::cp)] = o.cp;
  order_ = parse_order(o.order);
  int stride = 1;
  for (Axis a : order_) {
    stride_[idx(a)] = stride;
    stride *= size(a);
  }
  if (o.ranks_per_node > 0) {
    if (o.tp > o.ranks_per_node)
      fail("parallel grid: tp = {} is larger than the {} GPUs (ranks) per node: a tensor group "
           "exchanges activations in every layer and must stay inside a node; use tp <= {} and "
           "spread the rest over pp or dp", o.tp, o.ranks_per_node, o.ranks_per_node);
    for (const auto& g : groups(Axis::tp))
      if (std::any_of(g.begin(), g.end(), [&](int r) { return r / o.ranks_per_node != g.front() / o.ranks_per_node; }))
        fail("parallel grid: the tensor group of ranks {}..{} spans several nodes of {} ranks each "
             "(order \"{}\", tp = {}): put tp first in the order and use a tp that divides {}",
             g.front(), g.back(), o.ranks_per_node, o.order, o.tp, o.ranks_per_node);
  }
}

void ProcessGrid::check_rank(int rank) const {
  if (rank < 0 || rank >= world_)
    fail("parallel grid: rank {} is outside 0..{} ({})", rank, world_ - 1, describe());
}

GridCoord ProcessGrid::coord(int rank) const {
  check_rank(rank);
  GridCoord c;
  for (Axis a : kAllAxes) c[a] = rank / stride_[idx(a)] % size(a);
  return c;
}

int ProcessGrid::rank_of(const GridCoord& c) const {
  int rank = 0;
  for (Axis a : kAllAxes) {
    if (c[a] < 0 || c[a] >= size(a))
      fail("parallel grid: {} coordinate {} is outside 0..{} ({})", axis_name(a), c[a], size(a) - 1,
           describe());
    rank += c[a] * stride_[idx(a)];
  }
  return rank;
}

std::vector<int> ProcessGrid::group(Axis a, int rank) const {
  GridCoord c = coord(rank);
  std::vector<int> ranks;
  ranks.reserve(static_cast<size_t>(size(a)));
  for (int i = 0; i < size(a); ++i) {
    c[a] = i;
    ranks.push_back(rank_of(c));
  }
  return ranks;
}

int ProcessGrid::group_index(Axis a, int rank) const {
  // The rank's other coordinates, numbered in the grid's order without axis a: groups
  // come out in the order of their lowest rank.
  const GridCoord c = coord(rank);
  int index = 0, stride = 1;
  for (Axis b : order_) {
    if (b == a) continue;
    index += c[b] * stride;
    stride *= size(b);
  }
  return index;
}

std::vector<std::vector<int>> ProcessGrid::groups(Axis a) const {
  std::vector<std::vector<int>> out(static_cast<size_t>(world_ / size(a)));
  for (int r = 0; r < world_; ++r)
    if (coord(r)[a] == 0) out[static_cast<size_t>(group_index(a, r))] = group(a, r);
  return out;
}

std::vector<int> ProcessGrid::embedding_group(int rank) const {
  const int stage = coord(rank).pp, last = size(Axis::pp) - 1;
  if (stage != 0 && stage != last) return {};
  const std::vector<int> pipeline = group(Axis::pp, rank);
  if (last == 0) return {pipeline.front()};
  return {pipeline.front(), pipeline.back()};
}

std::vector<std::vector<int>> ProcessGrid::embedding_groups() const {
  std::vector<std::vector<int>> out;
  for (const auto& pipeline : groups(Axis::pp)) out.push_back(embedding_group(pipeline.front()));
  return out;
}

std::string ProcessGrid::describe() const {
  std::string s = fmt::format("world {} = dp {} x tp {} x pp {}", world_, size(Axis::dp),
                              size(Axis::tp), size(Axis::pp));
  if (size(Axis::cp) > 1) s += fmt::format(" x cp {}", size(Axis::cp));
  return s + fmt::format(" (order {})", order_text_);
}

}  // namespace aiscale::parallel
