#include "aiscale/plan/collectives.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace aiscale::plan {
namespace {
double bw_term(double bytes, const Link& link) {
  if (bytes <= 0) return 0;
  if (link.bytes_per_s <= 0) return std::numeric_limits<double>::infinity();
  return bytes / link.bytes_per_s;
}
}  // namespace

double ring_allreduce_time(double bytes, int p, const Link& link, int calls) {
  if (p <= 1 || bytes <= 0) return 0;
  return 2.0 * (p - 1) * link.alpha_s * calls + 2.0 * (p - 1) / p * bw_term(bytes, link);
}

double ring_reduce_scatter_time(double bytes, int p, const Link& link, int calls) {
  if (p <= 1 || bytes <= 0) return 0;
  return 1.0 * (p - 1) * link.alpha_s * calls + 1.0 * (p - 1) / p * bw_term(bytes, link);
}

double ring_allgather_time(double bytes, int p, const Link& link, int calls) {
  return ring_reduce_scatter_time(bytes, p, link, calls);
}

double p2p_time(double bytes, const Link& link) {
  if (bytes <= 0) return 0;
  return link.alpha_s + bw_term(bytes, link);
}

double hier_reduce_scatter_time(double bytes, GroupShape g, const Fabric& f, int calls) {
  const double inside = ring_reduce_scatter_time(bytes, g.per_node, f.intra, calls);
  const double across =
      ring_reduce_scatter_time(bytes / g.per_node, g.nodes, f.inter_per_gpu, calls);
  return inside + across;
}

double hier_allgather_time(double bytes, GroupShape g, const Fabric& f, int calls) {
  return hier_reduce_scatter_time(bytes, g, f, calls);  // the mirror image, same cost
}

double hier_allreduce_time(double bytes, GroupShape g, const Fabric& f, int calls) {
  return hier_reduce_scatter_time(bytes, g, f, calls) + hier_allgather_time(bytes, g, f, calls);
}

double topology_factor(Topology t, int nodes, int group_nodes, const TopologyAssumptions& a,
                       double global_taper) {
  if (nodes <= 1) return 1.0;
  switch (t) {
    case Topology::none:
    case Topology::fat_tree: return 1.0;
    case Topology::dragonfly:
    case Topology::dragonfly_plus: {
      const int group = group_nodes > 0 ? group_nodes : a.default_group_nodes;
      if (nodes <= group) return 1.0;
      const double share = t == Topology::dragonfly ? a.dragonfly_global : a.dragonfly_plus_global;
      return share * global_congestion(nodes, group, global_taper > 0 ? global_taper : a.global_taper);
    }
  }
  return 1.0;
}

double global_congestion(int nodes, int group_nodes, double taper) {
  if (group_nodes <= 0 || nodes <= group_nodes || !(taper > 0)) return 1.0;
  const double groups = std::ceil(static_cast<double>(nodes) / group_nodes);
  const double crossing = (groups - 1.0) / groups;
  return std::min(1.0, taper / crossing);
}

}  // namespace aiscale::plan
