// The hierarchical all-reduce of clusters: (1) inside each node the ranks' buffers are
// summed onto the node's leader (its lowest rank), along a chain of the node's ranks,
// chunk by chunk so that every link is busy at once; (2) the leaders, one per node,
// all-reduce the node sums over the ring (ring.h); (3) each leader sends the result down
// its node's chain. Only one rank per node uses the network between nodes, with the
// whole buffer once in each direction (a flat ring over all ranks makes every rank cross
// it), and the ring between nodes has as many steps as there are nodes, not ranks.
#pragma once
#include <cstdint>

#include "aiscale/parallel/algorithms/allreduce_choice.h"
#include "aiscale/parallel/algorithms/peer_links.h"

namespace aiscale::parallel::algorithms {

// In-place sum of n floats over every rank of `links`, whose nodes are `topology` (the
// same on every rank). Every rank ends with the same bits (the leaders' ring result).
void hierarchical_allreduce_sum(PeerLinks& links, const NodeTopology& topology, float* data,
                                int64_t n, int64_t chunk_floats);

}  // namespace aiscale::parallel::algorithms
