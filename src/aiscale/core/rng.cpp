#include "aiscale/core/rng.h"

#include <cmath>

namespace aiscale {

void Rng::reseed(uint64_t seed) {
  uint64_t x = seed;
  for (auto& s : state) {
    x += 0x9e3779b97f4a7c15ull;
    uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    s = z ^ (z >> 31);
  }
  has_spare = false;
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t Rng::next_u64() {
  uint64_t result = rotl(state[1] * 5, 7) * 9;
  uint64_t t = state[1] << 17;
  state[2] ^= state[0];
  state[3] ^= state[1];
  state[1] ^= state[2];
  state[0] ^= state[3];
  state[2] ^= t;
  state[3] = rotl(state[3], 45);
  return result;
}

float Rng::normal() {
  if (has_spare) {
    has_spare = false;
    return spare;
  }
  float u1 = uniform(), u2 = uniform();
  if (u1 < 1e-12f) u1 = 1e-12f;
  float r = std::sqrt(-2.0f * std::log(u1));
  float th = 6.28318530717958647692f * u2;
  spare = r * std::sin(th);
  has_spare = true;
  return r * std::cos(th);
}

}  // namespace aiscale
