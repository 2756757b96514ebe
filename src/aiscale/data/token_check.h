// Token ids against a model's vocabulary, checked before training: a shard tokenized for
// another vocabulary (GPT-2 BPE shards for a byte-level model) is found at start-up,
// naming the shard and the token, not when its batch happens to be drawn.
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>

#include "aiscale/data/token_shard.h"

namespace aiscale::data {

struct TokenOutsideVocabulary {
  std::filesystem::path shard;
  int64_t offset = 0;  // tokens before it in its shard (its byte is 1024 + 2 or 4 x offset)
  int64_t id = 0;      // the first id >= the vocabulary size in the shard
  int64_t max_id = 0;  // the largest id in the shard
};

// The first token of `shard` whose id is not below `vocab_size` (nullopt: every id fits).
// Either token width. One SIMD pass over the memory-mapped tokens (about 15 GB/s from the page cache on one
// core, docs/guide/checkpoints.md); only a shard that fails is read again for the offset.
std::optional<TokenOutsideVocabulary> find_token_outside_vocabulary(const MappedTokenShard& shard,
                                                                    int64_t vocab_size);

}  // namespace aiscale::data
