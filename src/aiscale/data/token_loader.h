// Distributed loader over token shards: serves (B, T) input and target batches to one
// rank of a data-parallel job, deterministically and resumably.
//
// Sampling semantics (see docs/guide/data.md):
//  - The shards are concatenated (in the order given; each glob sorted) into one
//    token stream of N tokens. Sample w is the window of T+1 tokens starting at w*T
//    (stride T, so consecutive windows share one token); W = (N-1)/T windows exist.
//  - An epoch visits the windows in an order: the identity without shuffle, else a
//    pseudo-random permutation of [0, W) derived from (seed, epoch) only, so every rank
//    computes the same one without communication and it changes every epoch.
//  - Global batch k of an epoch is the windows at positions [k*G, (k+1)*G) of that order,
//    G = world_size * B. Rank r gets positions k*G + r*B ... k*G + r*B + B-1. So one rank
//    with batch 2B sees, in each global batch, exactly the windows that ranks 0 and 1
//    with batch B see together (rank 0 the first B, rank 1 the next B).
//  - An epoch has W / G global batches; the W mod G windows left at the end of the
//    order are skipped in that epoch (with shuffle, different ones each epoch).
//  - The position is counted in windows of the epoch's order (samples), not in batches:
//    it means the same for any G, so a run resumed with another world size, batch size
//    or accumulation continues with the same window of the same order. Where fewer than
//    G windows remain, the epoch ends.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <optional>

#include "aiscale/data/token_check.h"
#include "aiscale/data/token_shard.h"

namespace aiscale::data {

struct TokenLoaderConfig {
  // Shard paths or glob patterns ("data/x_train_*.bin"); a pattern that matches nothing
  // is an error. Patterns are expanded in sorted order.
  std::vector<std::string> shards;
  int64_t batch_size = 0;  // B: windows per rank per batch
  int64_t seq_len = 0;     // T: tokens per window (inputs); targets are shifted by one
  int rank = 0;
  int world_size = 1;
  uint64_t seed = 0;
  bool shuffle = true;  // false for validation
};

class TokenLoader {
 public:
  // Where the stream stands: the first `sample` windows of epoch `epoch`'s order have been
  // served (by all ranks together). Identical on every rank and independent of the world
  // size and batch size; save it in checkpoints and restore() it to resume exactly.
  struct Position {
    int64_t epoch = 0;
    int64_t sample = 0;
    bool operator==(const Position&) const = default;
  };

  explicit TokenLoader(TokenLoaderConfig config);
  // Convenience: one path or glob pattern.
  TokenLoader(const std::string& shards, int64_t batch_size, int64_t seq_len, int rank,
              int world_size, uint64_t seed, bool shuffle);

  // Fills inputs (B, T) and targets (B, T), row-major: row j is window j of this rank's
  // share of the next global batch; targets[j][t] = inputs[j][t + 1] in the stream.
  // Moves to the next epoch (re-shuffled) after the last batch of an epoch.
  void next_batch(int32_t* inputs, int32_t* targets);

  // The epoch the next batch comes from (= full epochs completed).
  int64_t epoch() const { return position_.epoch; }
  Position position() const { return position_; }
  // Throws aiscale::Error if `position` is outside this loader's stream. A position with
  // fewer than a global batch of windows left in its epoch is the next epoch's start.
  void restore(Position position);
  // Back to the first batch of epoch 0 (e.g. before each validation pass).
  void reset() { restore({}); }

  // W: windows of T+1 tokens in the stream (what an epoch permutes).
  int64_t windows_per_epoch() const { return windows_; }
  // W / (world_size * B): global batches in an epoch.
  int64_t batches_per_epoch() const { return batches_per_epoch_; }
  // N: tokens in all shards together.
  int64_t total_tokens() const { return total_tokens_; }
  int64_t batch_size() const { return config_.batch_size; }
  int64_t seq_len() const { return config_.seq_len; }
  const std::vector<std::filesystem::path>& shard_paths() const { return paths_; }

  // The window (its start is window * T) at position `i` of epoch `epoch`'s order.
  int64_t window_at(int64_t epoch, int64_t i) const;

  // The first token id >= vocab_size in the shards, in stream order (nullopt: none).
  // A parallel pass over the memory-mapped tokens (token_check.h).
  std::optional<TokenOutsideVocabulary> find_token_outside(int64_t vocab_size) const;

 private:
  void copy_tokens(int64_t start, int64_t count, int32_t* out) const;

  TokenLoaderConfig config_;
  std::vector<std::filesystem::path> paths_;
  std::vector<MappedTokenShard> shards_;
  std::vector<int64_t> shard_starts_;  // first stream position of each shard, plus N
  int64_t total_tokens_ = 0;
  int64_t windows_ = 0;
  int64_t batches_per_epoch_ = 0;
  Position position_;
  std::vector<int32_t> window_buffer_;  // T+1 tokens
};

// Expands each pattern (glob(3), sorted); a plain path is kept as is. Throws
// aiscale::Error when a pattern matches no file.
std::vector<std::filesystem::path> expand_shard_patterns(const std::vector<std::string>& patterns);

}  // namespace aiscale::data
