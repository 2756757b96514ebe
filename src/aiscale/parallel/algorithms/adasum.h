// AdaSum (adaptive summation) of the ranks' gradients. Two gradients a and b combine as
//   combine(a, b) = (1 - a.b / (2|a|^2)) a + (1 - a.b / (2|b|^2)) b,
// which is a + b when they are orthogonal (a.b = 0) and a (= b) when they are equal: the
// sum where the ranks learned different things, the average where they learned the same.
// The combination is taken per segment of the buffer (the model's parameter tensors), so
// that each tensor's direction is judged on its own. Over 2^k ranks it runs in k rounds
// of recursive doubling: in round d the ranks r and r XOR 2^d swap their current vectors
// and both combine them, the lower rank's vector as a; after k rounds every rank holds
// the same combination of all ranks' gradients.
#pragma once
#include <cstdint>
#include <vector>

#include "aiscale/parallel/comm.h"

namespace aiscale::parallel::algorithms {

// out = combine(a, b) on each segment [offsets[s], offsets[s+1]) (the last one ends at n;
// offsets must start at 0 and ascend; empty: one segment). `out` may be `a` or `b`. Dot
// products and norms in double; a zero vector leaves the other unchanged.
void adasum_combine(const float* a, const float* b, float* out, int64_t n,
                    const std::vector<int64_t>& offsets);

// Whether AdaSum's recursive doubling runs on `world` ranks (a power of two).
bool adasum_supports(int world);

// In-place AdaSum over every rank of `comm` (world a power of two; fails otherwise),
// through its point-to-point send/recv. Every rank ends with the same bits.
void adasum_allreduce(Communicator& comm, float* data, int64_t n, const std::vector<int64_t>& offsets);

}  // namespace aiscale::parallel::algorithms
