#include "aiscale/parallel/algorithms/hierarchical.h"

#include <algorithm>
#include <vector>

#include "aiscale/core/error.h"
#include "aiscale/parallel/algorithms/ring.h"

namespace aiscale::parallel::algorithms {
namespace {

// Receives in flight at once along the chain (each into a chunk-sized slot).
constexpr int64_t kChainSlots = 4;

// Step 1: member j of the chain `node` gets the partial sum of members j+1.. from its
// successor, adds its own values and passes the sum on to its predecessor; the leader
// (j = 0) ends with the node's sum.
void reduce_along_chain(PeerLinks& links, const std::vector<int>& node, int j, float* data,
                        int64_t n, int64_t chunk) {
  const int q = static_cast<int>(node.size());
  const int64_t chunks = (n + chunk - 1) / chunk;
  const bool receives = j + 1 < q, sends = j > 0;
  std::vector<float> slots(receives ? static_cast<size_t>(std::min(kChainSlots, chunks) * chunk) : 0);
  std::vector<int> recv_id(static_cast<size_t>(chunks), -1);
  auto post = [&](int64_t c) {
    const int64_t off = c * chunk, count = std::min(chunk, n - off);
    recv_id[static_cast<size_t>(c)] =
        links.irecv(slots.data() + (c % kChainSlots) * chunk, count, node[static_cast<size_t>(j + 1)],
                    kNodeReduceTag);
  };
  if (receives)
    for (int64_t c = 0; c < std::min(kChainSlots, chunks); ++c) post(c);
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t off = c * chunk, count = std::min(chunk, n - off);
    if (receives) {
      links.wait(recv_id[static_cast<size_t>(c)]);
      const float* in = slots.data() + (c % kChainSlots) * chunk;
      for (int64_t k = 0; k < count; ++k) data[off + k] += in[k];
      if (c + kChainSlots < chunks) post(c + kChainSlots);  // the slot is free again
    }
    if (sends) links.isend(data + off, count, node[static_cast<size_t>(j - 1)], kNodeReduceTag);
  }
  // The sends read `data`, which step 3 overwrites.
  links.wait_all();
}

// Step 3: the leader's result down the chain, each chunk passed on as it arrives.
void broadcast_along_chain(PeerLinks& links, const std::vector<int>& node, int j, float* data,
                           int64_t n, int64_t chunk) {
  const int q = static_cast<int>(node.size());
  const int64_t chunks = (n + chunk - 1) / chunk;
  std::vector<int> recv_id;
  if (j > 0)
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t off = c * chunk;
      recv_id.push_back(links.irecv(data + off, std::min(chunk, n - off),
                                    node[static_cast<size_t>(j - 1)], kNodeBroadcastTag));
    }
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t off = c * chunk, count = std::min(chunk, n - off);
    if (j > 0) links.wait(recv_id[static_cast<size_t>(c)]);
    if (j + 1 < q) links.isend(data + off, count, node[static_cast<size_t>(j + 1)], kNodeBroadcastTag);
  }
  links.wait_all();
}

}  // namespace

void hierarchical_allreduce_sum(PeerLinks& links, const NodeTopology& topology, float* data,
                                int64_t n, int64_t chunk_floats) {
  const int rank = links.rank();
  if (static_cast<int>(topology.node_of.size()) != links.world())
    fail("internal: the node topology covers {} ranks, the communicator has {}",
         topology.node_of.size(), links.world());
  if (chunk_floats <= 0) fail("internal: the chain's chunk must hold at least one value");
  if (links.world() <= 1 || n <= 0) return;
  const std::vector<int>& node = topology.nodes[static_cast<size_t>(topology.node_of[static_cast<size_t>(rank)])];
  const int j = static_cast<int>(std::find(node.begin(), node.end(), rank) - node.begin());
  reduce_along_chain(links, node, j, data, n, chunk_floats);
  if (j == 0) ring_allreduce_sum(links, topology.leaders(), data, n, chunk_floats);
  broadcast_along_chain(links, node, j, data, n, chunk_floats);
}

}  // namespace aiscale::parallel::algorithms
