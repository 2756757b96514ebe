#include "aiscale/parallel/algorithms/ring.h"

#include <algorithm>
#include <numeric>

#include "aiscale/core/error.h"

namespace aiscale::parallel::algorithms {
namespace {

// The chunks of [begin, end): calls f(offset, count) for each, in order.
template <typename F>
void for_chunks(int64_t begin, int64_t end, int64_t chunk, F&& f) {
  for (int64_t off = begin; off < end; off += chunk) f(off, std::min(chunk, end - off));
}

}  // namespace

void ring_allreduce_sum(PeerLinks& links, const std::vector<int>& members, float* data, int64_t n,
                        int64_t chunk_floats) {
  const int p = static_cast<int>(members.size());
  const auto me = std::find(members.begin(), members.end(), links.rank());
  if (me == members.end()) fail("internal: rank {} is not a member of its ring", links.rank());
  if (chunk_floats <= 0) fail("internal: the ring's chunk must hold at least one value");
  if (p <= 1 || n <= 0) return;
  const int i = static_cast<int>(me - members.begin());
  const int right = members[static_cast<size_t>((i + 1) % p)];
  const int left = members[static_cast<size_t>((i + p - 1) % p)];
  auto mod = [p](int x) { return ((x % p) + p) % p; };
  // Segment s is [s*n/p, (s+1)*n/p): sizes differ by at most one value, any n and p.
  auto seg_begin = [n, p](int s) { return static_cast<int64_t>(s) * n / p; };
  std::vector<float> incoming(static_cast<size_t>(seg_begin(1) + 1));
  // Sends of reduce-scatter step k carry segment i-k; all-gather step k receives into the
  // same segment, so it first waits for them (a buffer being sent must not be written).
  std::vector<std::vector<int>> scatter_sends(static_cast<size_t>(p - 1));
  for_chunks(seg_begin(i), seg_begin(i + 1), chunk_floats, [&](int64_t off, int64_t count) {
    scatter_sends[0].push_back(links.isend(data + off, count, right, kRingTag));
  });
  // Reduce-scatter: step k receives segment i-k-1 from the left and adds it in; each
  // summed chunk goes on to the right at once (the next step's send, or after the last
  // step the first all-gather step's).
  for (int k = 0; k < p - 1; ++k) {
    const int s = mod(i - k - 1);
    const int64_t b = seg_begin(s), e = seg_begin(s + 1);
    std::vector<int> recvs;
    for_chunks(b, e, chunk_floats, [&](int64_t off, int64_t count) {
      recvs.push_back(links.irecv(incoming.data() + (off - b), count, left, kRingTag));
    });
    size_t c = 0;
    for_chunks(b, e, chunk_floats, [&](int64_t off, int64_t count) {
      links.wait(recvs[c++]);
      const float* in = incoming.data() + (off - b);
      float* out = data + off;
      for (int64_t j = 0; j < count; ++j) out[j] += in[j];
      const int id = links.isend(out, count, right, kRingTag);
      if (k + 1 < p - 1) scatter_sends[static_cast<size_t>(k + 1)].push_back(id);
    });
  }
  // All-gather: step k receives the summed segment i-k from the left, straight into place,
  // and passes each chunk on to the right (except in the last step).
  for (int k = 0; k < p - 1; ++k) {
    for (int id : scatter_sends[static_cast<size_t>(k)]) links.wait(id);
    const int s = mod(i - k);
    const int64_t b = seg_begin(s), e = seg_begin(s + 1);
    std::vector<int> recvs;
    for_chunks(b, e, chunk_floats, [&](int64_t off, int64_t count) {
      recvs.push_back(links.irecv(data + off, count, left, kRingTag));
    });
    size_t c = 0;
    for_chunks(b, e, chunk_floats, [&](int64_t off, int64_t count) {
      links.wait(recvs[c++]);
      if (k + 1 < p - 1) links.isend(data + off, count, right, kRingTag);
    });
  }
  links.wait_all();
}

void ring_allreduce_sum(PeerLinks& links, float* data, int64_t n, int64_t chunk_floats) {
  std::vector<int> all(static_cast<size_t>(links.world()));
  std::iota(all.begin(), all.end(), 0);
  ring_allreduce_sum(links, all, data, n, chunk_floats);
}

}  // namespace aiscale::parallel::algorithms
