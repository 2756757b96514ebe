// The bookkeeping of a ring all-reduce over p ranks, shared by the GPU ring
// (parallel/nccl/device_algorithms.cu) and its unit test: which part of the buffer each
// step sends and receives, and how a step is cut into chunks. Plain C++17 (nvcc compiles it).
#pragma once
#include <algorithm>
#include <cstdint>

namespace aiscale::parallel::algorithms {

struct RingSegments {
  int64_t n = 0;  // values in the buffer
  int p = 1;      // ranks in the ring

  // Segment s (any integer: taken modulo p) is [begin(s), end(s)); sizes differ by at most
  // one value, whatever n and p (segments are empty where n < p).
  int mod(int s) const { return ((s % p) + p) % p; }
  int64_t begin(int s) const { return static_cast<int64_t>(mod(s)) * n / p; }
  int64_t end(int s) const { return (static_cast<int64_t>(mod(s)) + 1) * n / p; }
  int64_t size(int s) const { return end(s) - begin(s); }
  // The largest segment, ceil(n / p).
  int64_t largest() const { return (n + p - 1) / p; }

  // Reduce-scatter step k (0 <= k < p-1) of rank i: sends segment i-k to the right,
  // receives segment i-k-1 from the left and adds it into place. Afterwards rank i holds
  // segment i+1 summed over every rank.
  int scatter_send(int i, int k) const { return mod(i - k); }
  int scatter_recv(int i, int k) const { return mod(i - k - 1); }
  int owned(int i) const { return mod(i + 1); }
  // All-gather step k of rank i: sends the summed segment i-k+1, receives segment i-k into
  // place (its left neighbour's send of the same step).
  int gather_send(int i, int k) const { return mod(i - k + 1); }
  int gather_recv(int i, int k) const { return mod(i - k); }

  // Chunks of at most `chunk` values per reduce-scatter step, the same count on every rank
  // (so that the ranks' sends and receives pair up step by step): enough for the largest
  // segment; a smaller segment has nothing to move in its last chunks.
  static int64_t chunks(int64_t values, int64_t chunk) { return (values + chunk - 1) / chunk; }
  int64_t chunks_per_step(int64_t chunk) const { return chunks(largest(), chunk); }
  // Chunk c of segment s: offset into the buffer and value count (0 past its end).
  int64_t chunk_begin(int s, int64_t c, int64_t chunk) const {
    return std::min(begin(s) + c * chunk, end(s));
  }
  int64_t chunk_size(int s, int64_t c, int64_t chunk) const {
    return std::min(chunk, end(s) - chunk_begin(s, c, chunk));
  }
};

}  // namespace aiscale::parallel::algorithms
