// The ring all-reduce: the buffer is cut into one segment per rank; in p-1 steps of
// reduce-scatter each rank passes a segment to its right neighbour, which adds it to its
// own, until every rank holds one segment summed over all ranks; in p-1 steps of
// all-gather the summed segments go round the ring. Each rank sends and receives
// 2(p-1)/p of the buffer whatever p is (bandwidth-optimal), in 2(p-1) latencies.
// Segments travel in chunks and each chunk is passed on as soon as it is summed, so
// steps overlap (pipelining). Every rank ends with identical bits: each value is summed
// on one rank and copied to the others.
#pragma once
#include <cstdint>
#include <vector>

#include "aiscale/parallel/algorithms/peer_links.h"

namespace aiscale::parallel::algorithms {

// In-place sum of n floats over the ranks `members` of `links` (this rank among them;
// every member calls with the same list, n and chunk_floats > 0).
void ring_allreduce_sum(PeerLinks& links, const std::vector<int>& members, float* data, int64_t n,
                        int64_t chunk_floats);

// Over every rank of `links`.
void ring_allreduce_sum(PeerLinks& links, float* data, int64_t n, int64_t chunk_floats);

}  // namespace aiscale::parallel::algorithms
