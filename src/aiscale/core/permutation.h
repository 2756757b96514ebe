// A pseudo-random permutation of [0, n) evaluated one index at a time in O(1) memory: a
// 6-round balanced Feistel network over the smallest even number of bits that covers n,
// cycle-walking back into [0, n) (the domain is under 4n, so a few steps on average). The
// same (n, key) gives the same permutation on every machine; unlike a stored Fisher-Yates
// shuffle it needs no O(n) table per epoch on every rank. The token loader and the image
// stores key it by (seed, epoch), each in its own way.
#pragma once
#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>

#include "aiscale/core/rng.h"

namespace aiscale {

inline uint64_t mix64(uint64_t x) {  // splitmix64's output function
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

class IndexPermutation {
 public:
  // `key` seeds the round keys (an Rng stream).
  IndexPermutation(uint64_t n, uint64_t key) : n_(n) {
    const int bits = std::max(2, static_cast<int>(std::bit_width(n > 0 ? n - 1 : 0)));
    half_bits_ = (bits + 1) / 2;
    half_mask_ = (uint64_t{1} << half_bits_) - 1;
    Rng rng(key);
    for (uint64_t& k : keys_) k = rng.next_u64();
  }

  uint64_t operator()(uint64_t i) const {
    uint64_t x = i;
    do x = round_trip(x);
    while (x >= n_);
    return x;
  }

 private:
  uint64_t round_trip(uint64_t x) const {
    uint64_t left = x >> half_bits_, right = x & half_mask_;
    for (uint64_t key : keys_) {
      const uint64_t next = left ^ (mix64(right ^ key) & half_mask_);
      left = right;
      right = next;
    }
    return (left << half_bits_) | right;
  }

  uint64_t n_;
  int half_bits_ = 1;
  uint64_t half_mask_ = 1;
  std::array<uint64_t, 6> keys_{};
};

}  // namespace aiscale
