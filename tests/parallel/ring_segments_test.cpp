// The bookkeeping of the GPU ring (RingSegments): replayed step by step on host vectors,
// in lockstep over p simulated ranks, exactly as device_algorithms.cu queues its
// messages: every receive pairs with its left neighbour's send of the same size, the
// reduce-scatter leaves rank i with segment i+1 summed, the all-gather completes the sum
// everywhere, and the owned segments cover the buffer once (the hierarchical gather).
#include <gtest/gtest.h>

#include <vector>

#include "aiscale/parallel/algorithms/ring_segments.h"

using aiscale::parallel::algorithms::RingSegments;

namespace {

using Buffers = std::vector<std::vector<float>>;

Buffers rank_values(int p, int64_t n) {
  Buffers b(static_cast<size_t>(p), std::vector<float>(static_cast<size_t>(n)));
  for (int r = 0; r < p; ++r)
    for (int64_t i = 0; i < n; ++i) b[r][static_cast<size_t>(i)] = static_cast<float>((i % 17) * (r + 1) + r);
  return b;
}

float expected(int p, int64_t i) {
  float s = 0;
  for (int r = 0; r < p; ++r) s += static_cast<float>((i % 17) * (r + 1) + r);
  return s;
}

// The reduce-scatter, chunk by chunk; returns false (with a failure) on a size mismatch.
void reduce_scatter(Buffers& b, const RingSegments& seg, int64_t chunk) {
  const int p = seg.p;
  for (int k = 0; k < p - 1; ++k)
    for (int64_t c = 0; c < seg.chunks_per_step(chunk); ++c) {
      // Every rank's send of this pair, taken before any rank adds (the sends read the
      // values of the previous step).
      Buffers sent(static_cast<size_t>(p));
      for (int i = 0; i < p; ++i) {
        const int s = seg.scatter_send(i, k);
        const int64_t off = seg.chunk_begin(s, c, chunk), len = seg.chunk_size(s, c, chunk);
        sent[i].assign(b[i].begin() + off, b[i].begin() + off + len);
      }
      for (int i = 0; i < p; ++i) {
        const int left = seg.mod(i - 1), s = seg.scatter_recv(i, k);
        const int64_t off = seg.chunk_begin(s, c, chunk), len = seg.chunk_size(s, c, chunk);
        ASSERT_EQ(static_cast<int64_t>(sent[left].size()), len)
            << "rank " << i << " step " << k << " chunk " << c << ": receive and send differ";
        for (int64_t j = 0; j < len; ++j) b[i][static_cast<size_t>(off + j)] += sent[left][static_cast<size_t>(j)];
      }
    }
}

void all_gather(Buffers& b, const RingSegments& seg) {
  const int p = seg.p;
  for (int k = 0; k < p - 1; ++k) {
    Buffers sent(static_cast<size_t>(p));
    for (int i = 0; i < p; ++i) {
      const int s = seg.gather_send(i, k);
      sent[i].assign(b[i].begin() + seg.begin(s), b[i].begin() + seg.end(s));
    }
    for (int i = 0; i < p; ++i) {
      const int left = seg.mod(i - 1), s = seg.gather_recv(i, k);
      ASSERT_EQ(static_cast<int64_t>(sent[left].size()), seg.size(s)) << "rank " << i << " step " << k;
      std::copy(sent[left].begin(), sent[left].end(), b[i].begin() + seg.begin(s));
    }
  }
}

}  // namespace

TEST(RingSegments, SegmentsCoverTheBufferWithSizesDifferingByAtMostOne) {
  for (int p : {1, 2, 3, 4, 7, 8})
    for (int64_t n : {0, 1, 2, 3, 5, 7, 8, 100, 1001}) {
      const RingSegments seg{n, p};
      int64_t covered = 0, lo = n, hi = 0;
      for (int s = 0; s < p; ++s) {
        EXPECT_EQ(seg.begin(s), covered);
        covered = seg.end(s);
        lo = std::min(lo, seg.size(s));
        hi = std::max(hi, seg.size(s));
      }
      EXPECT_EQ(covered, n) << "p " << p << " n " << n;
      EXPECT_LE(hi - lo, 1) << "p " << p << " n " << n;
      EXPECT_EQ(hi, seg.largest()) << "p " << p << " n " << n;
      EXPECT_EQ(seg.begin(-1), seg.begin(p - 1));
    }
}

TEST(RingSegments, ChunksOfASegmentCoverItAndNoMore) {
  const RingSegments seg{1001, 3};
  for (int64_t chunk : {1, 7, 64, 334, 1000}) {
    for (int s = 0; s < 3; ++s) {
      int64_t total = 0;
      for (int64_t c = 0; c < seg.chunks_per_step(chunk); ++c) {
        EXPECT_EQ(seg.chunk_begin(s, c, chunk), std::min(seg.begin(s) + total, seg.end(s)));
        total += seg.chunk_size(s, c, chunk);
        EXPECT_GE(seg.chunk_size(s, c, chunk), 0);
      }
      EXPECT_EQ(total, seg.size(s)) << "chunk " << chunk << " segment " << s;
    }
  }
}

// The whole ring, replayed: odd sizes, sizes below the rank count, chunks that do and do
// not divide the segments.
TEST(RingSegments, ReplayedRingSumsOnEveryRank) {
  for (int p : {2, 3, 4, 5})
    for (int64_t n : {1, 2, 3, 7, 64, 257, 1001})
      for (int64_t chunk : {1, 5, 64, 4096}) {
        const RingSegments seg{n, p};
        Buffers b = rank_values(p, n);
        reduce_scatter(b, seg, chunk);
        for (int i = 0; i < p; ++i) {
          const int s = seg.owned(i);
          for (int64_t j = seg.begin(s); j < seg.end(s); ++j)
            ASSERT_EQ(b[i][static_cast<size_t>(j)], expected(p, j))
                << "after reduce-scatter: rank " << i << " value " << j << " (p " << p << ", n " << n << ")";
        }
        all_gather(b, seg);
        for (int i = 0; i < p; ++i)
          for (int64_t j = 0; j < n; ++j)
            ASSERT_EQ(b[i][static_cast<size_t>(j)], expected(p, j))
                << "rank " << i << " value " << j << " (p " << p << ", n " << n << ", chunk " << chunk << ")";
      }
}

// The hierarchical gather to the leader takes each rank's owned segment: together they
// are every segment once.
TEST(RingSegments, OwnedSegmentsAreEachSegmentOnce) {
  for (int p : {1, 2, 3, 8}) {
    const RingSegments seg{100, p};
    std::vector<int> hits(static_cast<size_t>(p), 0);
    for (int i = 0; i < p; ++i) ++hits[static_cast<size_t>(seg.owned(i))];
    for (int h : hits) EXPECT_EQ(h, 1);
  }
}
