// Alpha-beta costs of the collectives a training step uses, over a two-level machine:
// GPUs linked inside a node, nodes linked by the network.
//   ring all-reduce of n bytes over p ranks:  2(p-1)·α + 2·(p-1)/p · n/B
//   ring reduce-scatter / all-gather:           (p-1)·α +   (p-1)/p · n/B
// (n = the full buffer; B = per-rank bandwidth in one direction.) Across nodes the ring
// runs hierarchically: inside each node first, then between nodes on each GPU's 1/k
// share, where every GPU gets its node's injection bandwidth / GPUs per node, scaled by
// the topology factor.
#pragma once
#include "aiscale/plan/assumptions.h"
#include "aiscale/plan/catalog.h"

namespace aiscale::plan {

struct Link {
  double alpha_s = 0;        // per ring step
  double bytes_per_s = 0;    // per rank, one direction
};

double ring_allreduce_time(double bytes, int p, const Link& link, int calls = 1);
double ring_reduce_scatter_time(double bytes, int p, const Link& link, int calls = 1);
double ring_allgather_time(double bytes, int p, const Link& link, int calls = 1);
double p2p_time(double bytes, const Link& link);

// A communication group placed `per_node` members in each of `nodes` nodes.
struct GroupShape {
  int per_node = 1;
  int nodes = 1;
  int size() const { return per_node * nodes; }
};

struct Fabric {
  Link intra;           // GPU to GPU inside a node
  Link inter_per_gpu;   // each GPU's share of its node's network bandwidth
};

// Two-level versions; `calls` collectives of bytes/calls each (latency paid per call).
double hier_reduce_scatter_time(double bytes, GroupShape g, const Fabric& f, int calls = 1);
double hier_allgather_time(double bytes, GroupShape g, const Fabric& f, int calls = 1);
double hier_allreduce_time(double bytes, GroupShape g, const Fabric& f, int calls = 1);

// Fraction of the network bandwidth a job spanning `nodes` nodes keeps on this topology:
// 1 on a fat tree (non-blocking assumed) and within one Dragonfly(+) group; beyond a
// group, TopologyAssumptions' share of the global links (other jobs use them too) times
// global_congestion with the catalogue's taper (0: TopologyAssumptions::global_taper).
double topology_factor(Topology t, int nodes, int group_nodes, const TopologyAssumptions& a,
                       double global_taper = 0);

// Congestion on a Dragonfly's global links: a job on G = ⌈nodes / group_nodes⌉ groups
// whose collectives' traffic spreads over its nodes (the scheduler's node order scatters
// ring and tree neighbours over the groups) sends (G−1)/G of each node's traffic over
// global links, which carry `taper` × the group's injection bandwidth: each node keeps
// min(1, taper / ((G−1)/G)). At 2 groups and a taper of 0.5, 1; it falls towards the taper
// as G grows.
double global_congestion(int nodes, int group_nodes, double taper);

}  // namespace aiscale::plan
