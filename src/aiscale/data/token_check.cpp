#include "aiscale/data/token_check.h"

#include <algorithm>

namespace aiscale::data {
namespace {

// Non-zero when some id exceeds `limit`: an OR of saturating differences, which the
// compiler turns into SIMD code on any x86-64 (SSE2's psubusw), bound by memory
// bandwidth. (A max reduction measured half as fast, and OpenMP threads no faster: every
// rank of a node checks at once, and one thread already fills the memory bus.)
template <class T>
T any_above(const T* t, int64_t n, T limit) {
  T above = 0;
  for (int64_t i = 0; i < n; ++i) {
    const T x = t[i];
    above |= x > limit ? static_cast<T>(x - limit) : T{0};
  }
  return above;
}

template <class T>
std::optional<TokenOutsideVocabulary> find_outside(const MappedTokenShard& shard, const T* t,
                                                   int64_t vocab_size) {
  const int64_t n = shard.size();
  if (vocab_size > static_cast<int64_t>(T(~T{0}))) return std::nullopt;  // every id fits
  if (vocab_size >= 1 && any_above(t, n, static_cast<T>(vocab_size - 1)) == 0) return std::nullopt;
  // Only a shard that fails is read again, for the offset and the largest id.
  const T* bad = std::find_if(t, t + n, [&](T id) { return static_cast<int64_t>(id) >= vocab_size; });
  if (bad == t + n) return std::nullopt;
  TokenOutsideVocabulary r;
  r.shard = shard.path();
  r.offset = bad - t;
  r.id = static_cast<int64_t>(*bad);
  r.max_id = static_cast<int64_t>(*std::max_element(t, t + n));
  return r;
}

}  // namespace

std::optional<TokenOutsideVocabulary> find_token_outside_vocabulary(const MappedTokenShard& shard,
                                                                    int64_t vocab_size) {
  if (shard.token_bytes() == 2) return find_outside(shard, shard.tokens().data(), vocab_size);
  return find_outside(shard, shard.tokens32().data(), vocab_size);
}

}  // namespace aiscale::data
