// Which all-reduce algorithm sums a communicator's float buffers (parallel.allreduce):
// the MPI library's own, or one of the hand-written algorithms over point-to-point
// messages: a chunked, pipelined ring (ring.h) or a hierarchical one that reduces inside
// each node first (hierarchical.h). Also which ranks share a node.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace aiscale::parallel::algorithms {

enum class AllreduceAlgorithm { library, ring, hierarchical };

// "library", "ring" or "hierarchical"; anything else fails naming the choices.
AllreduceAlgorithm parse_allreduce_algorithm(const std::string& name);
const char* allreduce_algorithm_name(AllreduceAlgorithm a);

// The pipelined algorithms move their data in chunks of this many floats (256 KiB): one
// chunk is summed while the next is on the wire.
inline constexpr int64_t kDefaultChunkFloats = int64_t{1} << 16;

struct AllreduceSetting {
  AllreduceAlgorithm algorithm = AllreduceAlgorithm::library;
  // Hierarchical: ranks per node when > 0 (node = rank / ranks_per_node, so that nodes can
  // be simulated on one host); 0 takes the nodes from where the ranks really run.
  int ranks_per_node = 0;
  int64_t chunk_floats = kDefaultChunkFloats;
};

// The nodes of a communicator's ranks: each node's ranks in ascending order, the nodes in
// the order of their lowest rank. A node's lowest rank is its leader.
struct NodeTopology {
  std::vector<std::vector<int>> nodes;
  std::vector<int> node_of;  // rank -> index into nodes
  std::vector<int> leaders() const;
};

// From a key per rank (ranks with equal keys share a node). Throws Error for no ranks.
NodeTopology topology_from_node_keys(const std::vector<int64_t>& key_of_rank);
// The node key of `rank` when parallel.ranks_per_node = ranks_per_node (> 0).
inline int64_t forced_node_key(int rank, int ranks_per_node) { return rank / ranks_per_node; }

}  // namespace aiscale::parallel::algorithms
