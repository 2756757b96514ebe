// Text -> shards: document splitting, input listing, val split, shard rollover, the CLI.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "aiscale/core/error.h"
#include "aiscale/data/token_shard.h"
#include "aiscale/data/tokenize_corpus.h"
#include "aiscale/data/tokenizer.h"

namespace aiscale::data {
namespace {

std::vector<std::string> split(std::string_view text, DocumentFormat format,
                               std::optional<std::string> separator = std::nullopt) {
  std::vector<std::string> docs;
  split_documents(text, format, separator, [&](std::string_view doc) { docs.emplace_back(doc); });
  return docs;
}

using Docs = std::vector<std::string>;

TEST(SplitDocuments, Formats) {
  const std::string text = "one\ntwo\n\n  \nthree\n%\nfour\n";
  EXPECT_EQ(split(text, DocumentFormat::whole), (Docs{text}));
  EXPECT_EQ(split(text, DocumentFormat::paragraphs), (Docs{"one\ntwo\n", "three\n%\nfour\n"}));
  EXPECT_EQ(split(text, DocumentFormat::lines), (Docs{"one\n", "two\n", "three\n", "%\n", "four\n"}));
  EXPECT_EQ(split(text, DocumentFormat::fortune), (Docs{"one\ntwo\n\n  \nthree\n", "four\n"}));
  EXPECT_EQ(split("a\n--\nb\n--\n", DocumentFormat::whole, "--"), (Docs{"a\n", "b\n"}));
  EXPECT_EQ(split("a\r\n%\r\nb", DocumentFormat::fortune), (Docs{"a\r\n", "b"}));
  EXPECT_TRUE(split("\n\n%\n%\n", DocumentFormat::fortune).empty());
  EXPECT_TRUE(split("", DocumentFormat::whole).empty());
}

class TokenizeCorpusTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("aiscale_tokenize_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_ / "in");
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  void write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / "in" / name, std::ios::binary) << text;
  }

  std::filesystem::path dir_;
};

TEST_F(TokenizeCorpusTest, InputListingSkipsFortuneIndexes) {
  write("b", "x");
  write("a", "y");
  write("a.dat", "index");
  write("a.u8", "dup");
  write(".hidden", "z");
  const auto plain = list_input_files({dir_ / "in"}, DocumentFormat::whole);
  ASSERT_EQ(plain.size(), 4u);
  EXPECT_EQ(plain[0].filename(), "a");
  const auto fortune = list_input_files({dir_ / "in"}, DocumentFormat::fortune);
  ASSERT_EQ(fortune.size(), 2u);
  EXPECT_EQ(fortune[0].filename(), "a");
  EXPECT_EQ(fortune[1].filename(), "b");
  EXPECT_THROW(list_input_files({dir_ / "missing"}, DocumentFormat::whole), Error);
}

TEST_F(TokenizeCorpusTest, ByteTokenizerEndToEnd) {
  // 40 documents "doc N\n" over two files; val_fraction 0.1 sends documents 9, 19,
  // 29, 39 to validation.
  std::string first, second;
  for (int i = 0; i < 20; ++i) first += "doc " + std::to_string(i) + "\n%\n";
  for (int i = 20; i < 40; ++i) second += "doc " + std::to_string(i) + "\n%\n";
  write("part1", first);
  write("part2", second);
  TokenizeOptions options;
  options.inputs = {dir_ / "in"};
  options.output_prefix = (dir_ / "out" / "demo").string();
  options.format = DocumentFormat::fortune;
  options.val_fraction = 0.1;
  options.shard_tokens = 100;
  options.threads = 2;
  const ByteTokenizer tokenizer;
  int progress_calls = 0;
  const TokenizeSummary s =
      tokenize_corpus(options, tokenizer, [&](const TokenizeProgress&) { ++progress_calls; });
  EXPECT_GT(progress_calls, 0);
  EXPECT_EQ(s.files, 2);
  EXPECT_EQ(s.documents, 40);
  EXPECT_EQ(s.val_documents, 4);
  // Each document: eot + "doc N\n" (6 bytes for N < 10, 7 otherwise).
  EXPECT_EQ(s.val_tokens, 7 + 8 + 8 + 8);
  EXPECT_EQ(s.train_tokens + s.val_tokens, 10 * 7 + 30 * 8);
  ASSERT_EQ(s.val_shards.size(), 1u);
  EXPECT_EQ(s.val_shards[0], dir_ / "out" / "demo_val_000000.bin");
  ASSERT_EQ(s.train_shards.size(), 3u);  // 279 train tokens, 100 per shard
  EXPECT_EQ(s.train_shards[2], dir_ / "out" / "demo_train_000002.bin");

  std::vector<int32_t> train;
  for (const auto& path : s.train_shards) {
    const auto tokens = read_token_shard(path);
    EXPECT_LE(tokens.size(), 100u);
    train.insert(train.end(), tokens.begin(), tokens.end());
  }
  const std::string text = tokenizer.decode(train);
  EXPECT_TRUE(text.starts_with("<|endoftext|>doc 0\n<|endoftext|>doc 1\n")) << text;
  EXPECT_EQ(text.find("doc 9\n"), std::string::npos);  // went to validation
  const auto val = read_token_shard(s.val_shards[0]);
  EXPECT_EQ(tokenizer.decode(std::vector<int32_t>(val.begin(), val.end())),
            "<|endoftext|>doc 9\n<|endoftext|>doc 19\n<|endoftext|>doc 29\n<|endoftext|>doc 39\n");

  // The same run with one thread gives the same bytes; a run with fewer shards removes
  // the stale ones.
  options.threads = 1;
  options.shard_tokens = 1000;
  const TokenizeSummary again = tokenize_corpus(options, tokenizer);
  ASSERT_EQ(again.train_shards.size(), 1u);
  EXPECT_EQ(again.removed_stale_shards.size(), 2u);
  EXPECT_FALSE(std::filesystem::exists(dir_ / "out" / "demo_train_000001.bin"));
  const auto single = read_token_shard(again.train_shards[0]);
  EXPECT_EQ(std::vector<int32_t>(single.begin(), single.end()), train);
}

TEST_F(TokenizeCorpusTest, Gpt2EndToEndMatchesDirectEncoding) {
  write("text", "Hello world\n\nThe quick brown fox.\n");
  TokenizeOptions options;
  options.inputs = {dir_ / "in" / "text"};
  options.output_prefix = (dir_ / "g").string();
  options.format = DocumentFormat::paragraphs;
  options.val_fraction = 0;
  BpeTokenizer tokenizer(default_gpt2_vocab_dir());
  const TokenizeSummary s = tokenize_corpus(options, tokenizer);
  EXPECT_TRUE(s.val_shards.empty());
  ASSERT_EQ(s.train_shards.size(), 1u);
  std::vector<uint16_t> expected = {50256};
  for (int32_t id : tokenizer.encode("Hello world\n")) expected.push_back(id);
  expected.push_back(50256);
  for (int32_t id : tokenizer.encode("The quick brown fox.\n")) expected.push_back(id);
  EXPECT_EQ(read_token_shard(s.train_shards[0]), expected);
}

TEST_F(TokenizeCorpusTest, BadOptionsAreErrors) {
  write("t", "text");
  TokenizeOptions options;
  options.inputs = {dir_ / "in"};
  const ByteTokenizer tokenizer;
  options.output_prefix = "";
  EXPECT_THROW(tokenize_corpus(options, tokenizer), Error);
  options.output_prefix = (dir_ / "o").string();
  options.val_fraction = 1.0;
  EXPECT_THROW(tokenize_corpus(options, tokenizer), Error);
  options.val_fraction = 0.1;
  options.shard_tokens = 0;
  EXPECT_THROW(tokenize_corpus(options, tokenizer), Error);
  EXPECT_THROW(parse_document_format("xml"), Error);
}

// The command line end to end: tokenize, then inspect.
TEST_F(TokenizeCorpusTest, CommandLine) {
  write("f", "first entry\n%\nsecond entry\n%\nthird\n");
  const std::string prefix = (dir_ / "cli" / "f").string();
  const std::string command = std::string(AISCALE_BINARY) + " data tokenize --input " +
                              (dir_ / "in").string() + " --output-prefix " + prefix +
                              " --fortune --tokenizer byte --val-fraction 0.4 2>/dev/null";
  FILE* pipe = ::popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string out;
  char buffer[4096];
  while (size_t n = std::fread(buffer, 1, sizeof buffer, pipe)) out.append(buffer, n);
  ASSERT_EQ(::pclose(pipe), 0) << out;
  EXPECT_NE(out.find("documents: 3 (2 train, 1 val)"), std::string::npos) << out;
  EXPECT_TRUE(std::filesystem::exists(prefix + "_train_000000.bin"));
  EXPECT_TRUE(std::filesystem::exists(prefix + "_val_000000.bin"));

  const std::string inspect = std::string(AISCALE_BINARY) + " data inspect --tokenizer byte " +
                              prefix + "_train_000000.bin";
  pipe = ::popen(inspect.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  out.clear();
  while (size_t n = std::fread(buffer, 1, sizeof buffer, pipe)) out.append(buffer, n);
  ASSERT_EQ(::pclose(pipe), 0) << out;
  EXPECT_NE(out.find("magic 20240520, version 1"), std::string::npos) << out;
  EXPECT_NE(out.find("<|endoftext|>first entry"), std::string::npos) << out;
}

}  // namespace
}  // namespace aiscale::data
