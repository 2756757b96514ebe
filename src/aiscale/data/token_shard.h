// Token shards in llm.c's format: a header of 256 int32 (magic 20240520, version 1,
// token count, the rest zero), then the tokens as uint16, all little-endian.
#pragma once
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

namespace aiscale::data {

inline constexpr int32_t kShardMagic = 20240520;
inline constexpr int32_t kShardVersion = 1;
inline constexpr size_t kShardHeaderInts = 256;
inline constexpr size_t kShardHeaderBytes = kShardHeaderInts * sizeof(int32_t);

// Writes one shard atomically: tokens go to a temporary file beside the target, which
// is fsync'ed and then renamed over it, so a reader never sees a half-written shard
// and a crash leaves the previous file (if any) intact. Tokens may be appended in
// pieces; nothing is visible at `path` until finish().
class TokenShardWriter {
 public:
  explicit TokenShardWriter(std::filesystem::path path);
  ~TokenShardWriter();  // without finish(): removes the temporary file
  TokenShardWriter(const TokenShardWriter&) = delete;
  TokenShardWriter& operator=(const TokenShardWriter&) = delete;

  void append(std::span<const uint16_t> tokens);
  // Ids must lie in [0, 65535]; throws aiscale::Error otherwise.
  void append(std::span<const int32_t> tokens);
  // Writes the header, flushes, fsyncs, renames into place and fsyncs the directory.
  void finish();
  // Like finish() but leaves the complete shard at temp_path(): a shard set is switched in
  // as a whole by commit_shard_set().
  void finish_aside();
  const std::filesystem::path& temp_path() const { return temp_path_; }

  int64_t token_count() const { return token_count_; }
  const std::filesystem::path& path() const { return path_; }

 private:
  void write_bytes(const void* data, size_t bytes);
  std::filesystem::path path_;
  std::filesystem::path temp_path_;
  std::FILE* file_ = nullptr;
  int64_t token_count_ = 0;
  std::vector<uint16_t> convert_;  // scratch for the int32 overload
};

void write_token_shard(const std::filesystem::path& path, std::span<const uint16_t> tokens);
void write_token_shard(const std::filesystem::path& path, std::span<const int32_t> tokens);

// Switching a set of shards in as a whole: a journal `journal` (written atomically) lists
// the renames (complete shard aside -> its name) and the removals (stale shards of the old
// set); they are carried out and the journal removed. A kill in between leaves the journal,
// and finish_shard_switches() (run by `data tokenize` and by every loader before it lists
// shards) completes it, so readers see the old set or the new one, never a mix.
struct ShardRename {
  std::filesystem::path from, to;
};
void commit_shard_set(const std::filesystem::path& journal, const std::vector<ShardRename>& renames,
                      const std::vector<std::filesystem::path>& removals);
// Completes every interrupted switch (files *.shard-switch) in `dir`; returns how many.
int finish_shard_switches(const std::filesystem::path& dir);

// Header of a shard, as read from disk.
struct ShardHeader {
  int32_t magic = 0;
  int32_t version = 0;
  int64_t token_count = 0;
  int64_t file_bytes = 0;
};

// Reads and validates only the header (and the file size). Throws aiscale::Error naming
// the file, what is wrong and the fix (re-run `aiscale data tokenize`).
ShardHeader read_shard_header(const std::filesystem::path& path);

// A shard memory-mapped read-only; validated on open.
class MappedTokenShard {
 public:
  explicit MappedTokenShard(std::filesystem::path path);
  ~MappedTokenShard();
  MappedTokenShard(MappedTokenShard&& other) noexcept;
  MappedTokenShard& operator=(MappedTokenShard&& other) noexcept;
  MappedTokenShard(const MappedTokenShard&) = delete;
  MappedTokenShard& operator=(const MappedTokenShard&) = delete;

  std::span<const uint16_t> tokens() const { return {tokens_, static_cast<size_t>(token_count_)}; }
  int64_t size() const { return token_count_; }
  const std::filesystem::path& path() const { return path_; }

 private:
  void unmap();
  std::filesystem::path path_;
  void* mapping_ = nullptr;
  size_t mapping_bytes_ = 0;
  const uint16_t* tokens_ = nullptr;
  int64_t token_count_ = 0;
};

// Convenience: the tokens of a shard, copied into memory.
std::vector<uint16_t> read_token_shard(const std::filesystem::path& path);

}  // namespace aiscale::data
