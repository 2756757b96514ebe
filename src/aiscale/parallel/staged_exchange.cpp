#include "aiscale/parallel/staged_exchange.h"

#include <algorithm>
#include <cstring>

#include "aiscale/core/error.h"

namespace aiscale::parallel::staging {

void widen(DType t, const void* in, float* out, int64_t n) {
  if (n <= 0) return;
  switch (t) {
    case DType::f32:
      std::memcpy(out, in, static_cast<size_t>(n) * 4);
      return;
    case DType::bf16: {
      const auto* h = static_cast<const uint16_t*>(in);
      for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(h[i]);
      return;
    }
    case DType::f16: {
      const auto* h = static_cast<const uint16_t*>(in);
      for (int64_t i = 0; i < n; ++i) out[i] = f16_to_f32(h[i]);
      return;
    }
  }
  fail("internal: no staged conversion from element type {}", static_cast<int>(t));
}

void narrow(DType t, const float* in, void* out, int64_t n) {
  if (n <= 0) return;
  switch (t) {
    case DType::f32:
      std::memcpy(out, in, static_cast<size_t>(n) * 4);
      return;
    case DType::bf16: {
      auto* h = static_cast<uint16_t*>(out);
      for (int64_t i = 0; i < n; ++i) h[i] = f32_to_bf16(in[i]);
      return;
    }
    case DType::f16: {
      auto* h = static_cast<uint16_t*>(out);
      for (int64_t i = 0; i < n; ++i) h[i] = f32_to_f16(in[i]);
      return;
    }
  }
  fail("internal: no staged conversion to element type {}", static_cast<int>(t));
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
