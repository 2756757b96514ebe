#include "aiscale/data/token_check.h"

#include <algorithm>

namespace aiscale::data {
namespace {

// Non-zero when some id exceeds `limit`: an OR of saturating differences, which the
// compiler turns into SIMD code on any x86-64 (SSE2's psubusw), bound by memory
// bandwidth. (A max reduction measured half as fast, and OpenMP threads no faster: every
// rank of a node checks at once, and one thread already fills the memory bus.)
uint16_t any_above(const uint16_t* t, int64_t n, uint16_t limit) {
  uint16_t above = 0;
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t x = t[i];
    above |= x > limit ? static_cast<uint16_t>(x - limit) : uint16_t{0};
  }
  return above;
}

}  // namespace

std::optional<TokenOutsideVocabulary> find_token_outside_vocabulary(const MappedTokenShard& shard,
                                                                    int64_t vocab_size) {
  if (vocab_size > 65535) return std::nullopt;  // every uint16 id fits
  const uint16_t* t = shard.tokens().data();
  const int64_t n = shard.size();
  if (vocab_size >= 1 && any_above(t, n, static_cast<uint16_t>(vocab_size - 1)) == 0)
    return std::nullopt;
  // Only a shard that fails is read again, for the offset and the largest id.
  const uint16_t* bad = std::find_if(t, t + n, [&](uint16_t id) { return id >= vocab_size; });
  if (bad == t + n) return std::nullopt;
  TokenOutsideVocabulary r;
  r.shard = shard.path();
  r.offset = bad - t;
  r.id = *bad;
  r.max_id = *std::max_element(t, t + n);
  return r;
}

}  // namespace aiscale::data
