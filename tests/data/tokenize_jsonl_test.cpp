// Corpora for `data tokenize`: JSONL (field, bad lines), gzip'd files, recursive input
// folders, and uint32 shards for a vocabulary over 65536.
#include <gtest/gtest.h>

#include <unistd.h>
#include <zlib.h>

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

namespace fs = std::filesystem;

void write_gzip(const fs::path& path, const std::string& text) {
  gzFile out = gzopen(path.c_str(), "wb");
  ASSERT_NE(out, nullptr);
  ASSERT_EQ(gzwrite(out, text.data(), static_cast<unsigned>(text.size())), static_cast<int>(text.size()));
  ASSERT_EQ(gzclose(out), Z_OK);
}

// Bytes to ids above 65535: id = 70000 + byte, boundary 99999.
class WideByteTokenizer final : public Tokenizer {
 public:
  std::string name() const override { return "wide"; }
  void encode_append(std::string_view text, std::vector<int32_t>& out) override {
    for (unsigned char c : text) out.push_back(70000 + c);
  }
  std::string decode(std::span<const int32_t> ids) const override {
    std::string s;
    for (int32_t id : ids) s += id == eot() ? std::string("|") : std::string(1, static_cast<char>(id - 70000));
    return s;
  }
  int32_t vocab_size() const override { return 100000; }
  int32_t eot() const override { return 99999; }
  std::unique_ptr<Tokenizer> clone() const override { return std::make_unique<WideByteTokenizer>(); }
};

class TokenizeJsonlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("aiscale_jsonl_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_ / "in");
  }
  void TearDown() override { fs::remove_all(dir_); }

  void write(const std::string& name, const std::string& text) {
    fs::create_directories((dir_ / "in" / name).parent_path());
    std::ofstream(dir_ / "in" / name, std::ios::binary) << text;
  }

  TokenizeOptions options() const {
    TokenizeOptions o;
    o.inputs = {dir_ / "in"};
    o.output_prefix = (dir_ / "out" / "c").string();
    o.val_fraction = 0;
    o.threads = 2;
    return o;
  }

  // The train split decoded with the byte tokenizer (boundaries as <|endoftext|>).
  static std::string decoded(const TokenizeSummary& s) {
    std::vector<int32_t> ids;
    for (const auto& p : s.train_shards) {
      const auto t = read_token_ids(p);
      ids.insert(ids.end(), t.begin(), t.end());
    }
    return ByteTokenizer().decode(ids);
  }

  std::string error_of(const TokenizeOptions& o) {
    try {
      tokenize_corpus(o, ByteTokenizer());
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }

  fs::path dir_;
};

TEST_F(TokenizeJsonlTest, ListingIsRecursiveSortedAndSkipsHidden) {
  write("b/x", "1");
  write("a/y", "2");
  write("a/deeper/z", "3");
  write("c", "4");
  write(".hidden/w", "5");
  write("a/.h", "6");
  const auto files = list_input_files({dir_ / "in"}, DocumentFormat::automatic);
  std::vector<std::string> names;
  for (const auto& f : files) names.push_back(fs::relative(f, dir_ / "in").string());
  EXPECT_EQ(names, (std::vector<std::string>{"a/deeper/z", "a/y", "b/x", "c"}));
}

TEST_F(TokenizeJsonlTest, GzipJsonlWithAutoFormat) {
  write_gzip(dir_ / "in" / "part1.jsonl.gz",
             "{\"text\": \"first doc\\nline two\", \"id\": 1}\n\n{\"id\": 2, \"text\": \"caf\\u00e9\"}\n"
             "{\"text\": \"   \"}\n");
  write("part2.txt", "a plain file is one document\n");
  write_gzip(dir_ / "in" / "part3.txt.gz", "a gzip'd plain file\n");
  const TokenizeSummary s = tokenize_corpus(options(), ByteTokenizer());
  EXPECT_EQ(s.files, 3);
  EXPECT_EQ(s.documents, 4);  // the blank text is skipped
  EXPECT_EQ(decoded(s),
            "<|endoftext|>first doc\nline two<|endoftext|>caf\xc3\xa9<|endoftext|>a plain file is one "
            "document\n<|endoftext|>a gzip'd plain file\n");
  EXPECT_EQ(s.text_bytes, 18 + 5 + 29 + 20);
  EXPECT_EQ(s.bad_lines, 0);
}

TEST_F(TokenizeJsonlTest, NamedFieldAndExplicitFormat) {
  write("data.txt", "{\"content\": \"x\", \"text\": \"not this\"}\n{\"content\": \"y\"}\n");
  TokenizeOptions o = options();
  o.format = DocumentFormat::jsonl;
  o.jsonl_field = "content";
  EXPECT_EQ(decoded(tokenize_corpus(o, ByteTokenizer())), "<|endoftext|>x<|endoftext|>y");
}

TEST_F(TokenizeJsonlTest, BadLinesNameFileAndLineOrAreSkipped) {
  write("d.jsonl", "{\"text\": \"ok\"}\n{\"text\": \"fine\"}\n{\"text\": broken\n[1, 2]\n"
                   "{\"title\": \"no text\"}\n{\"text\": 42}\n{\"text\": \"last\"}");
  const std::string message = error_of(options());
  EXPECT_NE(message.find((dir_ / "in" / "d.jsonl").string() + ":3:"), std::string::npos) << message;
  EXPECT_NE(message.find("--skip-bad-lines"), std::string::npos) << message;
  EXPECT_FALSE(fs::exists(dir_ / "out" / "c_train_000000.bin"));  // nothing half-written
  TokenizeOptions o = options();
  o.skip_bad_lines = true;
  const TokenizeSummary s = tokenize_corpus(o, ByteTokenizer());
  EXPECT_EQ(s.bad_lines, 4);
  EXPECT_EQ(decoded(s), "<|endoftext|>ok<|endoftext|>fine<|endoftext|>last");
  // The field present but not a string is named as such.
  write("d.jsonl", "{\"text\": 42}\n");
  EXPECT_NE(error_of(options()).find("d.jsonl:1: the line has a field \"text\" that is not a string"),
            std::string::npos) << error_of(options());
}

TEST_F(TokenizeJsonlTest, DamagedGzipIsAnError) {
  std::string text;
  for (int i = 0; i < 2000; ++i) text += "{\"text\": \"document " + std::to_string(i) + "\"}\n";
  write_gzip(dir_ / "in" / "big.jsonl.gz", text);
  fs::resize_file(dir_ / "in" / "big.jsonl.gz", fs::file_size(dir_ / "in" / "big.jsonl.gz") / 2);
  std::string message = error_of(options());
  EXPECT_NE(message.find("big.jsonl.gz"), std::string::npos) << message;
  EXPECT_NE(message.find("gzip"), std::string::npos) << message;
  fs::remove(dir_ / "in" / "big.jsonl.gz");
  write("fake.txt.gz", "plain text under a .gz name\n");
  message = error_of(options());
  EXPECT_NE(message.find("fake.txt.gz is named .gz but is not gzip data"), std::string::npos) << message;
}

TEST_F(TokenizeJsonlTest, LargeVocabularyWritesUint32Shards) {
  write("t.jsonl", "{\"text\": \"ab\"}\n{\"text\": \"c\"}\n");
  const TokenizeSummary s = tokenize_corpus(options(), WideByteTokenizer());
  ASSERT_EQ(s.train_shards.size(), 1u);
  const ShardHeader h = read_shard_header(s.train_shards[0]);
  EXPECT_EQ(h.version, 2);
  EXPECT_EQ(h.token_bytes, 4);
  EXPECT_EQ(h.vocab_size, 100000);
  EXPECT_EQ(read_token_ids(s.train_shards[0]), (std::vector<int32_t>{99999, 70000 + 'a', 70000 + 'b', 99999, 70000 + 'c'}));
}

}  // namespace
}  // namespace aiscale::data
