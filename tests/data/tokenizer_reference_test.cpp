// Reference encodings stored in tests/data/tokenizers (see generate.sh there): GPT-2's
// ids from the npm gpt-3-encoder's JavaScript encoder, compared with GPT-2 read from
// its own files and from tokenizer.json files in every supported layout (written by
// scripts/make_gpt2_tokenizer_json.py); SentencePiece ids from Debian's spm_encode.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "aiscale/core/error.h"
#include "aiscale/data/gpt2_pretokenize.h"
#include "aiscale/data/llama3_pretokenize.h"
#include "aiscale/data/sentencepiece_tokenizer.h"
#include "aiscale/data/tokenizer.h"

namespace aiscale::data {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Ids = std::vector<int32_t>;

const fs::path kDir = fs::path(AISCALE_SOURCE_DIR) / "tests" / "data" / "tokenizers";

json read_json(const fs::path& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  return json::parse(in);
}

const std::vector<std::string>& strings() {
  static const auto s = read_json(kDir / "strings.json").get<std::vector<std::string>>();
  return s;
}

// Every string encodes to its reference ids; reports the first few that differ.
void expect_reference(Tokenizer& t, const std::vector<std::pair<size_t, Ids>>& expected) {
  int wrong = 0;
  for (const auto& [index, ids] : expected) {
    const Ids got = t.encode(strings().at(index));
    if (got == ids) continue;
    if (++wrong <= 5)
      ADD_FAILURE() << t.name() << ": string " << index << " '" << strings()[index]
                    << "' encodes to " << json(got).dump() << ", expected " << json(ids).dump();
  }
  EXPECT_EQ(wrong, 0) << "of " << expected.size() << " strings";
}

std::vector<std::pair<size_t, Ids>> gpt2_expected() {
  const json e = read_json(kDir / "gpt2_expected.json");
  std::vector<std::pair<size_t, Ids>> out;
  for (size_t i = 0; i < e.size(); ++i) out.emplace_back(i, e[i].get<Ids>());
  return out;
}

TEST(TokenizerReference, StoredFilesAgree) {
  EXPECT_GE(strings().size(), 250u);
  EXPECT_EQ(read_json(kDir / "gpt2_expected.json").size(), strings().size());
}

TEST(TokenizerReference, Gpt2MatchesGpt3EncoderNpm) {
  auto t = make_tokenizer("gpt2");
  expect_reference(*t, gpt2_expected());
}

// GPT-2 as tokenizer.json, in each layout: merges as strings or pairs, ByteLevel's own
// regex or Split + ByteLevel(use_regex=false).
TEST(TokenizerReference, Gpt2TokenizerJsonMatchesGpt3EncoderNpm) {
  const fs::path dir = fs::temp_directory_path() / ("aiscale_gpt2_json_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const auto expected = gpt2_expected();
  for (const char* merges : {"strings", "pairs"})
    for (const char* pre : {"byte-level", "split"}) {
      const fs::path out = dir / (std::string(merges) + "_" + pre + ".json");
      const std::string command = "python3 " + std::string(AISCALE_SOURCE_DIR) +
                                  "/scripts/make_gpt2_tokenizer_json.py " + out.string() +
                                  " --merges " + merges + " --pre-tokenizer " + pre;
      ASSERT_EQ(std::system(command.c_str()), 0) << command;
      auto t = make_tokenizer(out.string());
      EXPECT_EQ(t->vocab_size(), 50257);
      EXPECT_EQ(t->eot(), 50256);
      expect_reference(*t, expected);
      // Unlike GPT-2's own encoder, a tokenizer.json matches its added token in the text.
      EXPECT_EQ(t->encode("a<|endoftext|>b"), (Ids{64, 50256, 65}));
      EXPECT_EQ(t->decode(t->encode("x<|endoftext|>y")), "x<|endoftext|>y");
    }
  EXPECT_EQ(make_tokenizer("gpt2")->encode("a<|endoftext|>b").size(), 9u);
  fs::remove_all(dir);
}

// Both pre-tokenizers against Python's regex module applying their patterns.
TEST(TokenizerReference, PreTokenizersMatchPythonRegex) {
  const json splits = read_json(kDir / "splits.json");
  const auto texts = splits["texts"].get<std::vector<std::string>>();
  EXPECT_GE(texts.size(), 600u);
  for (const char* name : {"gpt2", "llama3"}) {
    const auto expected = splits[name].get<std::vector<std::vector<std::string>>>();
    ASSERT_EQ(expected.size(), texts.size()) << name;
    int wrong = 0;
    for (size_t i = 0; i < texts.size(); ++i) {
      std::vector<std::string_view> views;
      if (std::string_view(name) == "gpt2")
        gpt2_pretokenize(texts[i], views);
      else
        llama3_pretokenize(texts[i], views);
      const std::vector<std::string> got(views.begin(), views.end());
      if (got != expected[i] && ++wrong <= 5)
        ADD_FAILURE() << name << ": '" << texts[i] << "' splits into " << json(got).dump()
                      << ", the regex into " << json(expected[i]).dump();
    }
    EXPECT_EQ(wrong, 0) << name;
  }
}

TEST(TokenizerReference, SentencePieceMatchesSpmEncode) {
  if (!sentencepiece_compiled()) GTEST_SKIP() << "built without libsentencepiece";
  auto t = make_tokenizer((kDir / "fortunes_bpe.model").string());
  EXPECT_EQ(t->vocab_size(), 1000);
  EXPECT_EQ(t->eot(), 1);  // <s>, spm_train's BOS
  EXPECT_EQ(t->decode(Ids{1}), "<s>");
  const json e = read_json(kDir / "spm_expected.json");
  EXPECT_GE(e.size(), 190u);
  std::vector<std::pair<size_t, Ids>> expected;
  for (const json& row : e) expected.emplace_back(row[0].get<size_t>(), row[1].get<Ids>());
  expect_reference(*t, expected);
  // Identity normalization and byte fallback: text comes back byte for byte.
  for (const auto& [index, ids] : expected) {
    const std::string& s = strings()[index];
    if (!s.starts_with(' ')) EXPECT_EQ(t->decode(ids), s) << index;
  }
  EXPECT_EQ(make_tokenizer((kDir / "fortunes_bpe.model").string(), TokenizerOptions{{}, "</s>"})->eot(), 2);
  EXPECT_THROW(make_tokenizer((kDir / "fortunes_bpe.model").string(), TokenizerOptions{{}, "<eot>"}), Error);
  const fs::path garbage = fs::temp_directory_path() / ("aiscale_garbage_" + std::to_string(::getpid()) + ".model");
  std::ofstream(garbage) << "not a model";
  EXPECT_THROW(make_tokenizer(garbage.string()), Error);
  fs::remove(garbage);
  EXPECT_THROW(t->decode(Ids{1000}), Error);
}

}  // namespace
}  // namespace aiscale::data
