// Token shards: write/read round trip and the errors for corrupt or truncated files.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "aiscale/core/error.h"
#include "aiscale/data/token_shard.h"

namespace aiscale::data {
namespace {

class TokenShardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("aiscale_shard_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // The message of the Error that reading `path` throws ("" if none).
  static std::string read_error(const std::filesystem::path& path) {
    try {
      MappedTokenShard shard(path);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }

  static void overwrite_int32(const std::filesystem::path& path, size_t index, int32_t value) {
    std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(static_cast<std::streamoff>(index * sizeof(int32_t)));
    file.write(reinterpret_cast<const char*>(&value), sizeof value);
  }

  std::filesystem::path dir_;
};

TEST_F(TokenShardTest, RoundTripAndLayout) {
  const std::vector<uint16_t> tokens = {50256, 15496, 995, 0, 65535, 7};
  const auto path = dir_ / "x_train_000000.bin";
  write_token_shard(path, std::span<const uint16_t>(tokens));
  EXPECT_EQ(std::filesystem::file_size(path), 1024 + 2 * tokens.size());
  EXPECT_EQ(read_token_shard(path), tokens);

  // The exact llm.c layout: int32 header [magic, version, count, 0...], then uint16.
  std::ifstream in(path, std::ios::binary);
  std::vector<int32_t> header(256);
  in.read(reinterpret_cast<char*>(header.data()), 1024);
  EXPECT_EQ(header[0], 20240520);
  EXPECT_EQ(header[1], 1);
  EXPECT_EQ(header[2], 6);
  for (size_t i = 3; i < 256; ++i) EXPECT_EQ(header[i], 0);
  uint16_t second = 0;
  in.seekg(1024 + 2);
  in.read(reinterpret_cast<char*>(&second), 2);
  EXPECT_EQ(second, 15496);

  const ShardHeader h = read_shard_header(path);
  EXPECT_EQ(h.token_count, 6);
  EXPECT_EQ(h.file_bytes, 1024 + 12);
}

TEST_F(TokenShardTest, StreamingWriterAndInt32Input) {
  const auto path = dir_ / "streamed.bin";
  {
    TokenShardWriter writer(path);
    const std::vector<int32_t> a = {1, 2, 3};
    const std::vector<uint16_t> b = {4, 5};
    writer.append(std::span<const int32_t>(a));
    EXPECT_FALSE(std::filesystem::exists(path)) << "nothing is visible before finish()";
    writer.append(std::span<const uint16_t>(b));
    writer.finish();
    EXPECT_EQ(writer.token_count(), 5);
  }
  EXPECT_EQ(read_token_shard(path), (std::vector<uint16_t>{1, 2, 3, 4, 5}));
  // No temporary files are left behind.
  int files = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(dir_)) ++files;
  EXPECT_EQ(files, 1);
}

TEST_F(TokenShardTest, AbandonedWriterLeavesNoFile) {
  const auto path = dir_ / "abandoned.bin";
  {
    TokenShardWriter writer(path);
    const std::vector<uint16_t> tokens = {1, 2};
    writer.append(std::span<const uint16_t>(tokens));
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir_));
}

TEST_F(TokenShardTest, RejectsIdsThatDoNotFitUint16) {
  const std::vector<int32_t> tokens = {1, 70000};
  EXPECT_THROW(write_token_shard(dir_ / "big.bin", std::span<const int32_t>(tokens)), Error);
  EXPECT_TRUE(std::filesystem::is_empty(dir_));
}

TEST_F(TokenShardTest, EmptyShardIsValid) {
  const auto path = dir_ / "empty.bin";
  write_token_shard(path, std::span<const uint16_t>());
  EXPECT_TRUE(read_token_shard(path).empty());
}

TEST_F(TokenShardTest, TruncatedTokensAreReported) {
  const auto path = dir_ / "cut.bin";
  const std::vector<uint16_t> tokens(100, 42);
  write_token_shard(path, std::span<const uint16_t>(tokens));
  std::filesystem::resize_file(path, 1024 + 150);
  const std::string message = read_error(path);
  EXPECT_NE(message.find(path.string()), std::string::npos) << message;
  EXPECT_NE(message.find("truncated"), std::string::npos) << message;
  EXPECT_NE(message.find("aiscale data tokenize"), std::string::npos) << message;
  EXPECT_THROW(read_shard_header(path), Error);
}

TEST_F(TokenShardTest, TruncatedHeaderIsReported) {
  const auto path = dir_ / "stub.bin";
  std::ofstream(path, std::ios::binary) << "tiny";
  const std::string message = read_error(path);
  EXPECT_NE(message.find("truncated"), std::string::npos) << message;
  EXPECT_NE(message.find(path.string()), std::string::npos) << message;
}

TEST_F(TokenShardTest, TrailingBytesAreReported) {
  const auto path = dir_ / "long.bin";
  const std::vector<uint16_t> tokens(10, 1);
  write_token_shard(path, std::span<const uint16_t>(tokens));
  std::filesystem::resize_file(path, 1024 + 24);
  EXPECT_NE(read_error(path).find("trailing"), std::string::npos);
}

TEST_F(TokenShardTest, WrongMagicIsReported) {
  const auto path = dir_ / "magic.bin";
  const std::vector<uint16_t> tokens(10, 1);
  write_token_shard(path, std::span<const uint16_t>(tokens));
  overwrite_int32(path, 0, 12345);
  const std::string message = read_error(path);
  EXPECT_NE(message.find("not a token shard"), std::string::npos) << message;
  EXPECT_NE(message.find("20240520"), std::string::npos) << message;
  EXPECT_NE(message.find(path.string()), std::string::npos) << message;
}

TEST_F(TokenShardTest, WrongVersionIsReported) {
  const auto path = dir_ / "version.bin";
  const std::vector<uint16_t> tokens(10, 1);
  write_token_shard(path, std::span<const uint16_t>(tokens));
  overwrite_int32(path, 1, 3);
  const std::string message = read_error(path);
  EXPECT_NE(message.find("version 3"), std::string::npos) << message;
  EXPECT_NE(message.find("aiscale data tokenize"), std::string::npos) << message;
}

TEST_F(TokenShardTest, CountNotMatchingSizeIsReported) {
  const auto path = dir_ / "count.bin";
  const std::vector<uint16_t> tokens(10, 1);
  write_token_shard(path, std::span<const uint16_t>(tokens));
  overwrite_int32(path, 2, 11);
  EXPECT_NE(read_error(path).find("header says 11 tokens"), std::string::npos);
  overwrite_int32(path, 2, -5);
  EXPECT_NE(read_error(path).find("corrupt"), std::string::npos);
}

TEST_F(TokenShardTest, MissingFileIsReported) {
  const std::string message = read_error(dir_ / "absent.bin");
  EXPECT_NE(message.find("absent.bin"), std::string::npos) << message;
}

TEST_F(TokenShardTest, OverwriteReplacesAtomically) {
  const auto path = dir_ / "again.bin";
  const std::vector<uint16_t> first = {1, 2, 3}, second = {9};
  write_token_shard(path, std::span<const uint16_t>(first));
  const MappedTokenShard mapped(path);  // an open reader keeps seeing the old file
  write_token_shard(path, std::span<const uint16_t>(second));
  EXPECT_EQ(std::vector<uint16_t>(mapped.tokens().begin(), mapped.tokens().end()), first);
  EXPECT_EQ(read_token_shard(path), second);
}

}  // namespace
}  // namespace aiscale::data
