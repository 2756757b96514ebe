// The distributed token loader; semantics in token_loader.h and docs/guide/data.md.
#include "aiscale/data/token_loader.h"

#include <glob.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>

#include <fmt/ranges.h>

#include "aiscale/core/error.h"
#include "aiscale/core/permutation.h"
#include "aiscale/core/rng.h"

namespace aiscale::data {
namespace {

// The windows' order in an epoch (core/permutation.h), keyed by (seed, epoch).
IndexPermutation window_order(int64_t windows, uint64_t seed, int64_t epoch) {
  return IndexPermutation(static_cast<uint64_t>(windows),
                          mix64(seed ^ mix64(static_cast<uint64_t>(epoch) + 0x9E3779B97F4A7C15ULL)));
}

bool has_glob_magic(const std::string& pattern) {
  return pattern.find_first_of("*?[") != std::string::npos;
}

}  // namespace

std::vector<std::filesystem::path> expand_shard_patterns(const std::vector<std::string>& patterns) {
  std::vector<std::filesystem::path> paths;
  for (const std::string& pattern : patterns) {
    if (!has_glob_magic(pattern)) {
      paths.emplace_back(pattern);
      continue;
    }
    glob_t matches{};
    const int status = ::glob(pattern.c_str(), 0, nullptr, &matches);
    if (status == 0)
      for (size_t i = 0; i < matches.gl_pathc; ++i) paths.emplace_back(matches.gl_pathv[i]);
    ::globfree(&matches);
    if (status == GLOB_NOMATCH)
      fail("no token shards match '{}'; check the pattern (e.g. data/name_train_*.bin) or "
           "create the shards with `aiscale data tokenize --output-prefix data/name`", pattern);
    if (status != 0) fail("cannot expand the shard pattern '{}' (glob error {})", pattern, status);
  }
  return paths;
}

TokenLoader::TokenLoader(const std::string& shards, int64_t batch_size, int64_t seq_len,
                         int rank, int world_size, uint64_t seed, bool shuffle)
    : TokenLoader(TokenLoaderConfig{{shards}, batch_size, seq_len, rank, world_size, seed, shuffle}) {}

TokenLoader::TokenLoader(TokenLoaderConfig config) : config_(std::move(config)) {
  const int64_t B = config_.batch_size, T = config_.seq_len;
  if (B <= 0 || T <= 0)
    fail("token loader: batch size ({}) and sequence length ({}) must be positive", B, T);
  if (config_.world_size < 1 || config_.rank < 0 || config_.rank >= config_.world_size)
    fail("token loader: rank {} is not in [0, world size {})", config_.rank, config_.world_size);
  if (config_.shards.empty())
    fail("token loader: no shards given; pass shard paths or a pattern such as "
         "data/name_train_*.bin");
  // A `data tokenize` killed while switching its shard set in is completed first, so the
  // pattern matches one whole set.
  for (const auto& pattern : config_.shards)
    finish_shard_switches(std::filesystem::path(pattern).parent_path());
  paths_ = expand_shard_patterns(config_.shards);
  shard_starts_.push_back(0);
  for (const auto& path : paths_) {
    shards_.emplace_back(path);
    total_tokens_ += shards_.back().size();
    shard_starts_.push_back(total_tokens_);
  }
  windows_ = total_tokens_ > T ? (total_tokens_ - 1) / T : 0;
  const int64_t global_batch = config_.world_size * B;
  batches_per_epoch_ = windows_ / global_batch;
  if (batches_per_epoch_ == 0)
    fail("token loader: the {} shard(s) from '{}' hold {} tokens, i.e. {} windows of T+1 = {} "
         "tokens, fewer than one global batch of world size x B = {} x {} = {} windows; use a "
         "smaller batch or sequence length, or tokenize more text",
         paths_.size(), fmt::join(config_.shards, " "), total_tokens_, windows_, T + 1,
         config_.world_size, B, global_batch);
  window_buffer_.resize(T + 1);
}

int64_t TokenLoader::window_at(int64_t epoch, int64_t i) const {
  AISCALE_CHECK(i >= 0 && i < windows_, "window position {} outside [0, {})", i, windows_);
  if (!config_.shuffle) return i;
  return static_cast<int64_t>(
      window_order(windows_, config_.seed, epoch)(static_cast<uint64_t>(i)));
}

void TokenLoader::copy_tokens(int64_t start, int64_t count, int32_t* out) const {
  // The shard holding `start`; a window may continue into the following shards.
  size_t s = std::upper_bound(shard_starts_.begin(), shard_starts_.end(), start) -
             shard_starts_.begin() - 1;
  while (count > 0) {
    const int64_t offset = start - shard_starts_[s];
    const int64_t n = std::min<int64_t>(count, shards_[s].size() - offset);
    shards_[s].copy(offset, n, out);
    out += n, start += n, count -= n;
    ++s;
  }
}

void TokenLoader::next_batch(int32_t* inputs, int32_t* targets) {
  const int64_t B = config_.batch_size, T = config_.seq_len, G = config_.world_size * B;
  const int64_t first = position_.sample + config_.rank * B;
  const IndexPermutation order = window_order(windows_, config_.seed, position_.epoch);
  for (int64_t j = 0; j < B; ++j) {
    const int64_t w = config_.shuffle ? static_cast<int64_t>(order(first + j)) : first + j;
    copy_tokens(w * T, T + 1, window_buffer_.data());
    std::memcpy(inputs + j * T, window_buffer_.data(), T * sizeof(int32_t));
    std::memcpy(targets + j * T, window_buffer_.data() + 1, T * sizeof(int32_t));
  }
  position_.sample += G;
  // Fewer windows left than a global batch takes: the epoch ends here.
  if (position_.sample + G > windows_) position_ = {position_.epoch + 1, 0};
}

void TokenLoader::restore(Position position) {
  if (position.epoch < 0 || position.sample < 0 || position.sample > windows_)
    fail("cannot resume the token loader at epoch {}, sample {}: an epoch of these shards has {} "
         "windows of T+1 = {} tokens; was the checkpoint made with other data or another "
         "sequence length?", position.epoch, position.sample, windows_, config_.seq_len + 1);
  if (position.sample + config_.world_size * config_.batch_size > windows_)
    position = {position.epoch + 1, 0};
  position_ = position;
}

std::optional<TokenOutsideVocabulary> TokenLoader::find_token_outside(int64_t vocab_size) const {
  for (const MappedTokenShard& shard : shards_)
    if (auto bad = find_token_outside_vocabulary(shard, vocab_size)) return bad;
  return std::nullopt;
}

}  // namespace aiscale::data
