#include "aiscale/parallel/staged_exchange.h"

#include <algorithm>
#include <cstring>

#include "aiscale/core/error.h"

namespace aiscale::parallel::staging {

// The 16-bit types (bf16, fp16) to and from fp32, element by element (f32: a copy).
void widen(DType t, const void* in, float* out, int64_t n) {
  if (n <= 0) return;
  if (t == DType::f32) {
    std::memcpy(out, in, static_cast<size_t>(n) * 4);
    return;
  }
  const auto* h = static_cast<const uint16_t*>(in);
  const bool bf16 = t == DType::bf16;
  for (int64_t i = 0; i < n; ++i) out[i] = bf16 ? bf16_to_f32(h[i]) : f16_to_f32(h[i]);
}

void narrow(DType t, const float* in, void* out, int64_t n) {
  if (n <= 0) return;
  if (t == DType::f32) {
    std::memcpy(out, in, static_cast<size_t>(n) * 4);
    return;
  }
  auto* h = static_cast<uint16_t*>(out);
  const bool bf16 = t == DType::bf16;
  for (int64_t i = 0; i < n; ++i) h[i] = bf16 ? f32_to_bf16(in[i]) : f32_to_f16(in[i]);
}

std::vector<size_t> point_to_point_order(int rank, const std::vector<PeerOp>& ops) {
  // The peers, ordered by the pair each forms with this rank: (min, max) ascending.
  std::vector<int> peers;
  for (const PeerOp& op : ops)
    if (std::find(peers.begin(), peers.end(), op.peer) == peers.end()) peers.push_back(op.peer);
  auto pair_of = [rank](int peer) { return std::pair(std::min(rank, peer), std::max(rank, peer)); };
  std::sort(peers.begin(), peers.end(), [&](int a, int b) { return pair_of(a) < pair_of(b); });
  std::vector<size_t> order;
  order.reserve(ops.size());
  for (int peer : peers) {
    const bool sends_first = rank < peer;
    for (bool send : {sends_first, !sends_first})
      for (size_t i = 0; i < ops.size(); ++i)
        if (ops[i].peer == peer && ops[i].send == send) order.push_back(i);
  }
  return order;
}

}  // namespace aiscale::parallel::staging
