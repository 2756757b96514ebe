// Token shards in llm.c's format: a header of 256 int32, then the tokens, all
// little-endian. Version 1 (llm.c's GPT-2 shards) stores uint16 tokens; version 2, for
// vocabularies of more than 65536 ids, stores uint32 tokens. Header: [0] magic 20240520,
// [1] version, [2] token count, [3] the vocabulary size of the tokenizer that wrote it (0:
// not recorded; llm.c reads only [0..2]), the rest zero. llm.c's Llama 3 shards (magic
// 20240801, version 7, uint32 tokens) are read too.
#pragma once
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

namespace aiscale::data {

inline constexpr int32_t kShardMagic = 20240520;
inline constexpr int32_t kShardVersion = 1;        // uint16 tokens
inline constexpr int32_t kShardVersionWide = 2;    // uint32 tokens
inline constexpr int32_t kLlmcLlama3Magic = 20240801;  // llm.c's uint32 shards, version 7
inline constexpr int32_t kLlmcLlama3Version = 7;
inline constexpr size_t kShardHeaderInts = 256;
inline constexpr size_t kShardHeaderBytes = kShardHeaderInts * sizeof(int32_t);

// Bytes per token a vocabulary needs: 2 (version 1) up to 65536 ids, else 4 (version 2).
inline int shard_token_bytes(int64_t vocab_size) { return vocab_size > 65536 ? 4 : 2; }

// Writes one shard atomically: tokens go to a temporary file beside the target, which
// is fsync'ed and then renamed over it, so a reader never sees a half-written shard
// and a crash leaves the previous file (if any) intact. Tokens may be appended in
// pieces; nothing is visible at `path` until finish().
class TokenShardWriter {
 public:
  // `vocab_size` (0: unknown, taken as at most 65536) picks the version (2-byte tokens up
  // to 65536 ids, else 4-byte) and is recorded in the header.
  explicit TokenShardWriter(std::filesystem::path path, int64_t vocab_size = 0);
  ~TokenShardWriter();  // without finish(): removes the temporary file
  TokenShardWriter(const TokenShardWriter&) = delete;
  TokenShardWriter& operator=(const TokenShardWriter&) = delete;

  // Version 1 shards only.
  void append(std::span<const uint16_t> tokens);
  // Ids must lie in [0, vocab_size) (in [0, 65535] with vocab_size 0); throws
  // aiscale::Error otherwise.
  void append(std::span<const int32_t> tokens);
  int token_bytes() const { return token_bytes_; }
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
  int64_t vocab_size_ = 0;
  int token_bytes_ = 2;
  std::vector<uint16_t> convert_;  // scratch for the int32 overload
  std::vector<uint32_t> convert_wide_;
};

void write_token_shard(const std::filesystem::path& path, std::span<const uint16_t> tokens);
void write_token_shard(const std::filesystem::path& path, std::span<const int32_t> tokens,
                       int64_t vocab_size = 0);

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
  int token_bytes = 2;      // 2 (uint16) or 4 (uint32)
  int64_t vocab_size = 0;   // header[3]; 0 when not recorded
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

  int token_bytes() const { return token_bytes_; }
  // The tokens of a version-1 shard (token_bytes() == 2; else AISCALE_CHECK fails).
  std::span<const uint16_t> tokens() const;
  // The tokens of a uint32 shard (token_bytes() == 4).
  std::span<const uint32_t> tokens32() const;
  int32_t token(int64_t i) const {
    return token_bytes_ == 2 ? static_cast<const uint16_t*>(tokens_)[i]
                             : static_cast<int32_t>(static_cast<const uint32_t*>(tokens_)[i]);
  }
  // Tokens [offset, offset + count) as int32, into `out`.
  void copy(int64_t offset, int64_t count, int32_t* out) const;
  int64_t size() const { return token_count_; }
  const std::filesystem::path& path() const { return path_; }

 private:
  void unmap();
  std::filesystem::path path_;
  void* mapping_ = nullptr;
  size_t mapping_bytes_ = 0;
  const void* tokens_ = nullptr;
  int64_t token_count_ = 0;
  int token_bytes_ = 2;
};

// Convenience: the tokens of a version-1 shard, copied into memory.
std::vector<uint16_t> read_token_shard(const std::filesystem::path& path);
// The tokens of a shard of any version, as int32.
std::vector<int32_t> read_token_ids(const std::filesystem::path& path);

}  // namespace aiscale::data
