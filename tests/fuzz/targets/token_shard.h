// Token shards (data/token_shard.h): the header check, the memory-mapped reader, and a
// loader drawing a few batches from the shard, as training does.
#pragma once
#include "../fuzz_support.h"
#include "aiscale/data/token_loader.h"
#include "aiscale/data/token_shard.h"

namespace aiscale::fuzz {

inline int fuzz_token_shard(const uint8_t* data, size_t size) {
  const std::filesystem::path path = scratch_dir() / "shard_000000.bin";
  write_bytes(path, as_text(data, size));
  return expect_user_errors([&] {
    const data::ShardHeader h = data::read_shard_header(path);
    data::MappedTokenShard shard(path);
    if (shard.size() != h.token_count) invariant_broken("the header and the mapped shard disagree");
    uint64_t sum = 0;
    for (int64_t i = 0; i < shard.size(); ++i) sum += static_cast<uint32_t>(shard.token(i));
    (void)sum;
    data::TokenLoader loader(path.string(), 2, 4, 0, 1, 7, true);
    std::vector<int32_t> inputs(8), targets(8);
    for (int i = 0; i < 3; ++i) loader.next_batch(inputs.data(), targets.data());
  });
}

}  // namespace aiscale::fuzz
