// Deterministic random numbers (xoshiro256**, seeded by splitmix64). Same seed, same
// stream on every platform; the state is plain data so checkpoints can save it.
#pragma once
#include <array>
#include <cstdint>

namespace aiscale {

class Rng {
 public:
  explicit Rng(uint64_t seed = 0) { reseed(seed); }
  void reseed(uint64_t seed);
  uint64_t next_u64();
  // Uniform in [0, 1).
  float uniform() { return static_cast<float>(next_u64() >> 40) * (1.0f / 16777216.0f); }
  // Uniform integer in [0, n).
  uint64_t below(uint64_t n) { return next_u64() % n; }
  // Standard normal (Box-Muller, both values used).
  float normal();

  std::array<uint64_t, 4> state{};
  bool has_spare = false;
  float spare = 0.0f;
};

}  // namespace aiscale
