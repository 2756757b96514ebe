// Shards for large vocabularies: version 2 (uint32 tokens), the vocabulary size in the
// header, llm.c's uint32 shards, and every reader (loader, vocabulary check) on both widths.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "aiscale/core/error.h"
#include "aiscale/data/token_check.h"
#include "aiscale/data/token_loader.h"
#include "aiscale/data/token_shard.h"

namespace aiscale::data {
namespace {

namespace fs = std::filesystem;

class WideShardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("aiscale_wide_shard_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  static std::vector<int32_t> header_of(const fs::path& path) {
    std::vector<int32_t> header(256);
    std::ifstream(path, std::ios::binary).read(reinterpret_cast<char*>(header.data()), 1024);
    return header;
  }

  // A shard written byte by byte: header [magic, version, count], then uint32 tokens.
  void write_raw(const fs::path& path, int32_t magic, int32_t version, const std::vector<uint32_t>& t) {
    std::vector<int32_t> header(256, 0);
    header[0] = magic, header[1] = version, header[2] = static_cast<int32_t>(t.size());
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(header.data()), 1024);
    out.write(reinterpret_cast<const char*>(t.data()), static_cast<std::streamsize>(4 * t.size()));
  }

  fs::path dir_;
};

TEST_F(WideShardTest, LargeVocabularyWritesVersion2) {
  EXPECT_EQ(shard_token_bytes(50257), 2);
  EXPECT_EQ(shard_token_bytes(65536), 2);
  EXPECT_EQ(shard_token_bytes(65537), 4);
  const std::vector<int32_t> ids = {128000, 0, 65535, 65536, 128255, 7};
  const fs::path path = dir_ / "l_train_000000.bin";
  write_token_shard(path, std::span<const int32_t>(ids), 128256);
  EXPECT_EQ(fs::file_size(path), 1024 + 4 * ids.size());
  const auto header = header_of(path);
  EXPECT_EQ(header[0], 20240520);
  EXPECT_EQ(header[1], 2);
  EXPECT_EQ(header[2], 6);
  EXPECT_EQ(header[3], 128256);
  for (size_t i = 4; i < 256; ++i) EXPECT_EQ(header[i], 0);
  const ShardHeader h = read_shard_header(path);
  EXPECT_EQ(h.token_bytes, 4);
  EXPECT_EQ(h.vocab_size, 128256);
  EXPECT_EQ(read_token_ids(path), ids);
  const MappedTokenShard shard(path);
  EXPECT_EQ(shard.token_bytes(), 4);
  EXPECT_EQ(shard.token(4), 128255);
  EXPECT_THROW(read_token_shard(path), Error);  // the uint16 reader refuses it
}

TEST_F(WideShardTest, SmallVocabularyKeepsVersion1AndRecordsItsSize) {
  const std::vector<int32_t> ids = {50256, 15496, 995};
  const fs::path path = dir_ / "g.bin";
  write_token_shard(path, std::span<const int32_t>(ids), 50257);
  EXPECT_EQ(fs::file_size(path), 1024 + 2 * ids.size());
  const auto header = header_of(path);
  EXPECT_EQ(header[1], 1);
  EXPECT_EQ(header[3], 50257);
  EXPECT_EQ(read_token_shard(path), (std::vector<uint16_t>{50256, 15496, 995}));
}

TEST_F(WideShardTest, IdsOutsideTheVocabularyAreRefused) {
  for (int32_t bad : {128256, -1}) {
    const std::vector<int32_t> ids = {1, bad};
    try {
      write_token_shard(dir_ / "bad.bin", std::span<const int32_t>(ids), 128256);
      FAIL() << "expected an error for " << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::to_string(bad)), std::string::npos) << e.what();
    }
  }
  const std::vector<int32_t> ids = {1, 50257};
  EXPECT_THROW(write_token_shard(dir_ / "bad.bin", std::span<const int32_t>(ids), 50257), Error);
  EXPECT_TRUE(fs::is_empty(dir_));
}

TEST_F(WideShardTest, ReadsLlmcUint32Shards) {
  write_raw(dir_ / "llmc.bin", 20240801, 7, {128000, 9906, 1917});
  EXPECT_EQ(read_token_ids(dir_ / "llmc.bin"), (std::vector<int32_t>{128000, 9906, 1917}));
  EXPECT_EQ(read_shard_header(dir_ / "llmc.bin").token_bytes, 4);
  write_raw(dir_ / "odd.bin", 20240801, 5, {1});
  EXPECT_THROW(read_shard_header(dir_ / "odd.bin"), Error);
}

TEST_F(WideShardTest, TruncatedWideShardIsReported) {
  const std::vector<int32_t> ids(10, 70000);
  write_token_shard(dir_ / "cut.bin", std::span<const int32_t>(ids), 100000);
  fs::resize_file(dir_ / "cut.bin", 1024 + 20);  // what 10 uint16 tokens would take
  try {
    MappedTokenShard shard(dir_ / "cut.bin");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("of 4 bytes"), std::string::npos) << e.what();
  }
}

TEST_F(WideShardTest, VocabularyCheckOnUint32Tokens) {
  std::vector<int32_t> ids(5000, 3);
  ids[4321] = 128255;
  ids[10] = 99999;
  write_token_shard(dir_ / "v.bin", std::span<const int32_t>(ids), 128256);
  const MappedTokenShard shard(dir_ / "v.bin");
  const auto bad = find_token_outside_vocabulary(shard, 50257);
  ASSERT_TRUE(bad.has_value());
  EXPECT_EQ(bad->offset, 10);
  EXPECT_EQ(bad->id, 99999);
  EXPECT_EQ(bad->max_id, 128255);
  const auto later = find_token_outside_vocabulary(shard, 100000);
  ASSERT_TRUE(later.has_value());
  EXPECT_EQ(later->offset, 4321);
  EXPECT_FALSE(find_token_outside_vocabulary(shard, 128256).has_value());
  // An id above INT32_MAX in an llm.c shard is outside any vocabulary.
  write_raw(dir_ / "huge.bin", 20240801, 7, {1, 0x80000000u});
  const auto huge = find_token_outside_vocabulary(MappedTokenShard(dir_ / "huge.bin"), int64_t{1} << 24);
  ASSERT_TRUE(huge.has_value());
  EXPECT_EQ(huge->id, int64_t{0x80000000});
}

// The loader concatenates shards of both widths into one stream.
TEST_F(WideShardTest, LoaderReadsBothWidths) {
  std::vector<int32_t> narrow(40), wide(41);
  for (int i = 0; i < 40; ++i) narrow[i] = i;
  for (int i = 0; i < 41; ++i) wide[i] = 100000 + i;
  write_token_shard(dir_ / "m_train_000000.bin", std::span<const int32_t>(narrow), 50257);
  write_token_shard(dir_ / "m_train_000001.bin", std::span<const int32_t>(wide), 128256);
  TokenLoader loader((dir_ / "m_train_*.bin").string(), 1, 8, 0, 1, 0, /*shuffle=*/false);
  EXPECT_EQ(loader.total_tokens(), 81);
  std::vector<int32_t> inputs(8), targets(8), stream;
  for (int64_t b = 0; b < loader.batches_per_epoch(); ++b) {
    loader.next_batch(inputs.data(), targets.data());
    stream.insert(stream.end(), inputs.begin(), inputs.end());
    if (b == 4) EXPECT_EQ(targets.back(), 100000);  // window 4 ends on the second shard's first token
  }
  ASSERT_EQ(stream.size(), 80u);
  for (int i = 0; i < 80; ++i) EXPECT_EQ(stream[i], i < 40 ? i : 100000 + i - 40) << i;
  EXPECT_TRUE(loader.find_token_outside(128256) == std::nullopt);
  ASSERT_TRUE(loader.find_token_outside(50257).has_value());
  EXPECT_EQ(loader.find_token_outside(50257)->shard.filename(), "m_train_000001.bin");
}

}  // namespace
}  // namespace aiscale::data
