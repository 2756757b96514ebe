// Token shard writer (atomic) and reader (memory-mapped, validated).
#include "aiscale/data/token_shard.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <bit>
#include <cerrno>
#include <cstring>

#include "aiscale/core/error.h"
#include "aiscale/core/fs.h"
#include "aiscale/core/split.h"
#include "aiscale/core/validate.h"

namespace aiscale::data {

static_assert(std::endian::native == std::endian::little,
              "token shards are little-endian; a big-endian host would need byte swapping");

namespace {

constexpr std::string_view kFix = "re-run `aiscale data tokenize` to regenerate it";

std::string errno_text() { return std::strerror(errno); }

// Checks a header against the file size; fails with a message naming the file.
ShardHeader validate_header(const std::filesystem::path& path, const int32_t* header,
                            int64_t file_bytes) {
  ShardHeader h;
  h.file_bytes = file_bytes;
  h.magic = header[0];
  h.version = header[1];
  h.token_count = header[2];
  h.vocab_size = header[3];
  if (h.magic == kLlmcLlama3Magic) {
    if (h.version != kLlmcLlama3Version)
      fail("token shard {} has llm.c's uint32 magic {} but version {} (expected {}); {}",
           path.string(), h.magic, h.version, kLlmcLlama3Version, kFix);
    h.token_bytes = 4;
    h.vocab_size = 0;  // llm.c does not record it
  } else if (h.magic != kShardMagic) {
    fail("{} is not a token shard: its first int32 is {}, expected the magic number {}; "
         "point the loader at the *.bin files written by `aiscale data tokenize`, or {}",
         path.string(), h.magic, kShardMagic, kFix);
  } else if (h.version == kShardVersion || h.version == kShardVersionWide) {
    h.token_bytes = h.version == kShardVersion ? 2 : 4;
  } else {
    fail("token shard {} has version {}, but this aiscale reads versions {} (uint16 tokens) and "
         "{} (uint32 tokens); {}", path.string(), h.version, kShardVersion, kShardVersionWide, kFix);
  }
  if (h.token_count < 0)
    fail("token shard {} is corrupt: its header says {} tokens; {}", path.string(),
         h.token_count, kFix);
  if (h.vocab_size < 0)
    fail("token shard {} is corrupt: its header records a vocabulary of {} tokens; {}",
         path.string(), h.vocab_size, kFix);
  const int64_t expected = static_cast<int64_t>(kShardHeaderBytes) + h.token_bytes * h.token_count;
  if (file_bytes != expected)
    fail("token shard {} is {}: its header says {} tokens of {} bytes ({} bytes in all) but the "
         "file has {} bytes; the write was probably interrupted or the file was copied "
         "partially; {}",
         path.string(), file_bytes < expected ? "truncated" : "corrupt (trailing bytes)",
         h.token_count, h.token_bytes, expected, file_bytes, kFix);
  return h;
}

}  // namespace

// ---------------------------------------------------------------- writer

TokenShardWriter::TokenShardWriter(std::filesystem::path path, int64_t vocab_size)
    : path_(std::move(path)), vocab_size_(vocab_size), token_bytes_(shard_token_bytes(vocab_size)) {
  AISCALE_CHECK(vocab_size >= 0 && vocab_size <= INT32_MAX, "vocabulary size {}", vocab_size);
  temp_path_ = path_;
  temp_path_ += ".tmp." + std::to_string(::getpid());
  file_ = std::fopen(temp_path_.c_str(), "wb");
  if (file_ == nullptr)
    fail("cannot create token shard {}: {}; check that the directory exists and is writable",
         temp_path_.string(), errno_text());
  const std::array<int32_t, kShardHeaderInts> placeholder{};  // rewritten by finish()
  write_bytes(placeholder.data(), kShardHeaderBytes);
}

TokenShardWriter::~TokenShardWriter() {
  if (file_ != nullptr) {
    std::fclose(file_);
    std::error_code ignored;
    std::filesystem::remove(temp_path_, ignored);
  }
}

void TokenShardWriter::write_bytes(const void* data, size_t bytes) {
  if (bytes > 0 && std::fwrite(data, 1, bytes, file_) != bytes)
    fail("writing token shard {} failed: {}; is the disk full?", temp_path_.string(), errno_text());
}

void TokenShardWriter::append(std::span<const uint16_t> tokens) {
  AISCALE_CHECK(file_ != nullptr, "append after finish on {}", path_.string());
  AISCALE_CHECK(token_bytes_ == 2, "uint16 tokens appended to the uint32 shard {}", path_.string());
  write_bytes(tokens.data(), tokens.size_bytes());
  token_count_ += static_cast<int64_t>(tokens.size());
}

void TokenShardWriter::append(std::span<const int32_t> tokens) {
  AISCALE_CHECK(file_ != nullptr, "append after finish on {}", path_.string());
  const int64_t limit = vocab_size_ > 0 ? vocab_size_ : 65536;
  for (int32_t id : tokens)
    if (id < 0 || id >= limit)
      fail("token id {} does not fit token shard {}: ids must be in [0, {}) ({})", id,
           path_.string(), limit,
           vocab_size_ > 0 ? "the tokenizer's vocabulary" : "uint16 tokens of a version-1 shard");
  if (token_bytes_ == 2) {
    convert_.assign(tokens.begin(), tokens.end());
    write_bytes(convert_.data(), convert_.size() * sizeof(uint16_t));
  } else {
    convert_wide_.assign(tokens.begin(), tokens.end());
    write_bytes(convert_wide_.data(), convert_wide_.size() * sizeof(uint32_t));
  }
  token_count_ += static_cast<int64_t>(tokens.size());
}

void TokenShardWriter::finish() {
  finish_aside();
  if (std::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    const std::string why = errno_text();
    std::error_code ignored;
    std::filesystem::remove(temp_path_, ignored);
    fail("could not move token shard into place at {}: {}", path_.string(), why);
  }
  // Make the rename itself durable.
  fsync_directory(path_.parent_path().string());
}

void TokenShardWriter::finish_aside() {
  AISCALE_CHECK(file_ != nullptr, "finish called twice on {}", path_.string());
  if (token_count_ > INT32_MAX)
    fail("token shard {} would hold {} tokens, more than the format's int32 count allows; "
         "use a smaller --shard-tokens", path_.string(), token_count_);
  std::array<int32_t, kShardHeaderInts> header{};
  header[0] = kShardMagic;
  header[1] = token_bytes_ == 2 ? kShardVersion : kShardVersionWide;
  header[2] = static_cast<int32_t>(token_count_);
  header[3] = static_cast<int32_t>(vocab_size_);
  if (std::fseek(file_, 0, SEEK_SET) != 0)
    fail("seeking in {} failed: {}", temp_path_.string(), errno_text());
  write_bytes(header.data(), kShardHeaderBytes);
  if (std::fflush(file_) != 0 || ::fsync(::fileno(file_)) != 0)
    fail("flushing token shard {} to disk failed: {}", temp_path_.string(), errno_text());
  const int close_status = std::fclose(file_);
  file_ = nullptr;
  if (close_status != 0) {
    const std::string why = errno_text();
    std::error_code ignored;
    std::filesystem::remove(temp_path_, ignored);
    fail("closing token shard {} failed: {}", temp_path_.string(), why);
  }
}

namespace {

// Carries out a journal: renames whose source is gone were done before a kill.
void apply_shard_switch(const std::filesystem::path& journal) {
  const std::string text = read_file(journal.string());
  for (std::string_view piece : split(text, '\n')) {
    const std::string line(piece);
    const auto tab = line.find('\t');
    if (line.size() < 3 || tab != 1)
      fail("shard switch journal {} is corrupt (line '{}'); remove it and run `aiscale data "
           "tokenize` again", journal.string(), line);
    std::error_code ec;
    if (line[0] == 'R') {
      const auto tab2 = line.find('\t', 2);
      if (tab2 == std::string::npos) fail("shard switch journal {} is corrupt", journal.string());
      const std::filesystem::path from = line.substr(2, tab2 - 2), to = line.substr(tab2 + 1);
      if (std::filesystem::exists(from, ec)) {
        std::filesystem::rename(from, to, ec);
        if (ec) fail("cannot switch token shard {} into place: {}", to.string(), ec.message());
      }
    } else if (line[0] == 'D') {
      std::filesystem::remove(line.substr(2), ec);
    }
  }
  fsync_directory(journal.parent_path().string());
  std::error_code ec;
  std::filesystem::remove(journal, ec);
  fsync_directory(journal.parent_path().string());
}

}  // namespace

void commit_shard_set(const std::filesystem::path& journal, const std::vector<ShardRename>& renames,
                      const std::vector<std::filesystem::path>& removals) {
  std::string text;
  for (const auto& r : renames) text += "R\t" + r.from.string() + "\t" + r.to.string() + "\n";
  for (const auto& p : removals) text += "D\t" + p.string() + "\n";
  atomic_write_file(journal.string(), text);  // from here on the new set is decided
  apply_shard_switch(journal);
}

int finish_shard_switches(const std::filesystem::path& dir) {
  int done = 0;
  std::error_code ec;
  std::vector<std::filesystem::path> journals;
  for (const auto& e : std::filesystem::directory_iterator(dir.empty() ? "." : dir, ec))
    if (e.path().filename().string().ends_with(".shard-switch")) journals.push_back(e.path());
  for (const auto& j : journals) {
    try {
      apply_shard_switch(j);
    } catch (const Error&) {
      if (!std::filesystem::exists(j)) continue;  // another process (rank) finished it
      throw;
    }
    ++done;
  }
  return done;
}

void write_token_shard(const std::filesystem::path& path, std::span<const uint16_t> tokens) {
  TokenShardWriter writer(path);
  writer.append(tokens);
  writer.finish();
}

void write_token_shard(const std::filesystem::path& path, std::span<const int32_t> tokens,
                       int64_t vocab_size) {
  TokenShardWriter writer(path, vocab_size);
  writer.append(tokens);
  writer.finish();
}

// ---------------------------------------------------------------- reader

ShardHeader read_shard_header(const std::filesystem::path& path) {
  validate::regular_file(path.string(), "token shard");  // a FIFO would block the open
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr)
    fail("cannot open token shard {}: {}; check the path, or create shards with "
         "`aiscale data tokenize`", path.string(), errno_text());
  std::array<int32_t, kShardHeaderInts> header{};
  const size_t got = std::fread(header.data(), 1, kShardHeaderBytes, file);
  struct stat info {};
  const int stat_status = ::fstat(::fileno(file), &info);
  std::fclose(file);
  if (stat_status != 0) fail("cannot stat token shard {}: {}", path.string(), errno_text());
  if (got < kShardHeaderBytes)
    fail("token shard {} is truncated: {} bytes, shorter than the {}-byte header; {}",
         path.string(), static_cast<int64_t>(info.st_size), kShardHeaderBytes, kFix);
  return validate_header(path, header.data(), info.st_size);
}

MappedTokenShard::MappedTokenShard(std::filesystem::path path) : path_(std::move(path)) {
  validate::regular_file(path_.string(), "token shard");  // a FIFO would block the open
  const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    fail("cannot open token shard {}: {}; check the path, or create shards with "
         "`aiscale data tokenize`", path_.string(), errno_text());
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    const std::string why = errno_text();
    ::close(fd);
    fail("cannot stat token shard {}: {}", path_.string(), why);
  }
  if (info.st_size < static_cast<off_t>(kShardHeaderBytes)) {
    ::close(fd);
    fail("token shard {} is truncated: {} bytes, shorter than the {}-byte header; {}",
         path_.string(), static_cast<int64_t>(info.st_size), kShardHeaderBytes, kFix);
  }
  mapping_bytes_ = static_cast<size_t>(info.st_size);
  void* mapping = ::mmap(nullptr, mapping_bytes_, PROT_READ, MAP_PRIVATE, fd, 0);
  const std::string why = errno_text();
  ::close(fd);  // the mapping keeps the file alive
  if (mapping == MAP_FAILED)
    fail("cannot memory-map token shard {}: {}", path_.string(), why);
  mapping_ = mapping;
  try {
    const ShardHeader header =
        validate_header(path_, static_cast<const int32_t*>(mapping_), info.st_size);
    token_count_ = header.token_count;
    token_bytes_ = header.token_bytes;
  } catch (...) {
    unmap();
    throw;
  }
  tokens_ = static_cast<const char*>(mapping_) + kShardHeaderBytes;
}

std::span<const uint16_t> MappedTokenShard::tokens() const {
  AISCALE_CHECK(token_bytes_ == 2, "uint16 view of the uint32 shard {}", path_.string());
  return {static_cast<const uint16_t*>(tokens_), static_cast<size_t>(token_count_)};
}

std::span<const uint32_t> MappedTokenShard::tokens32() const {
  AISCALE_CHECK(token_bytes_ == 4, "uint32 view of the uint16 shard {}", path_.string());
  return {static_cast<const uint32_t*>(tokens_), static_cast<size_t>(token_count_)};
}

void MappedTokenShard::copy(int64_t offset, int64_t count, int32_t* out) const {
  AISCALE_CHECK(offset >= 0 && count >= 0 && offset + count <= token_count_,
                "tokens [{}, {}) outside shard {} of {}", offset, offset + count, path_.string(),
                token_count_);
  if (token_bytes_ == 2) {
    const uint16_t* t = static_cast<const uint16_t*>(tokens_) + offset;
    for (int64_t i = 0; i < count; ++i) out[i] = t[i];
  } else {
    const uint32_t* t = static_cast<const uint32_t*>(tokens_) + offset;
    for (int64_t i = 0; i < count; ++i) out[i] = static_cast<int32_t>(t[i]);
  }
}

MappedTokenShard::~MappedTokenShard() { unmap(); }

void MappedTokenShard::unmap() {
  if (mapping_ != nullptr) ::munmap(mapping_, mapping_bytes_);
  mapping_ = nullptr;
  mapping_bytes_ = 0;
  tokens_ = nullptr;
  token_count_ = 0;
}

MappedTokenShard::MappedTokenShard(MappedTokenShard&& other) noexcept
    : path_(std::move(other.path_)),
      mapping_(other.mapping_),
      mapping_bytes_(other.mapping_bytes_),
      tokens_(other.tokens_),
      token_count_(other.token_count_),
      token_bytes_(other.token_bytes_) {
  other.mapping_ = nullptr;
  other.tokens_ = nullptr;
  other.mapping_bytes_ = 0;
  other.token_count_ = 0;
}

MappedTokenShard& MappedTokenShard::operator=(MappedTokenShard&& other) noexcept {
  if (this != &other) {
    unmap();
    path_ = std::move(other.path_);
    mapping_ = other.mapping_;
    mapping_bytes_ = other.mapping_bytes_;
    tokens_ = other.tokens_;
    token_count_ = other.token_count_;
    token_bytes_ = other.token_bytes_;
    other.mapping_ = nullptr;
    other.tokens_ = nullptr;
    other.mapping_bytes_ = 0;
    other.token_count_ = 0;
  }
  return *this;
}

std::vector<uint16_t> read_token_shard(const std::filesystem::path& path) {
  const MappedTokenShard shard(path);
  if (shard.token_bytes() != 2)
    fail("token shard {} holds uint32 tokens (version 2); read it with read_token_ids", path.string());
  return {shard.tokens().begin(), shard.tokens().end()};
}

std::vector<int32_t> read_token_ids(const std::filesystem::path& path) {
  const MappedTokenShard shard(path);
  std::vector<int32_t> ids(static_cast<size_t>(shard.size()));
  shard.copy(0, shard.size(), ids.data());
  return ids;
}

}  // namespace aiscale::data
