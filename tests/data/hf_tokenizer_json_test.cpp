// tokenizer.json loading: added tokens, the boundary token, ignore_merges, both merge
// forms, and one clear error per unsupported or malformed field.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "aiscale/core/error.h"
#include "aiscale/data/byte_level.h"
#include "aiscale/data/hf_tokenizer_json.h"
#include "aiscale/data/llama3_pretokenize.h"
#include "aiscale/data/tokenizer.h"

namespace aiscale::data {
namespace {

using nlohmann::json;
using Ids = std::vector<int32_t>;

// A small byte-level BPE in tokenizer.json form: ids 0..255 are the bytes, then one id
// per merge, then the added tokens.
struct TinyBpe {
  std::vector<std::pair<std::string, std::string>> merges = {
      {"h", "e"}, {"l", "l"}, {"he", "ll"}, {" ", "w"}, {"o", "r"}, {" w", "or"}};
  std::vector<std::string> extra_tokens;  // in the vocabulary without a merge
  std::vector<std::string> added = {"<|begin_of_text|>", "<|end_of_text|>"};

  json build() const {
    json vocab = json::object();
    for (int b = 0; b < 256; ++b) vocab[bytes_to_byte_level(std::string(1, static_cast<char>(b)))] = b;
    int next = 256;
    json merge_list = json::array();
    for (const auto& [l, r] : merges) {
      vocab[bytes_to_byte_level(l + r)] = next++;
      merge_list.push_back(bytes_to_byte_level(l) + " " + bytes_to_byte_level(r));
    }
    for (const auto& t : extra_tokens) vocab[bytes_to_byte_level(t)] = next++;
    json added_list = json::array();
    for (const auto& a : added) added_list.push_back({{"id", next++}, {"content", a}, {"special", true}});
    return {{"version", "1.0"},
            {"added_tokens", added_list},
            {"normalizer", nullptr},
            {"pre_tokenizer",
             {{"type", "Sequence"},
              {"pretokenizers",
               {{{"type", "Split"}, {"pattern", {{"Regex", std::string(kLlama3Pattern)}}},
                 {"behavior", "Isolated"}, {"invert", false}},
                {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true},
                 {"use_regex", false}}}}}},
            {"model", {{"type", "BPE"}, {"dropout", nullptr}, {"vocab", vocab}, {"merges", merge_list}}}};
  }
};

class HfTokenizerJsonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("aiscale_hf_json_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string write(const json& j, const std::string& name = "tokenizer.json") {
    std::ofstream(dir_ / name) << j.dump();
    return (dir_ / name).string();
  }

  // The error message of loading `j`, or "" if it loads.
  std::string error_of(const json& j, const std::string& eot = {}) {
    try {
      load_hf_tokenizer_json(write(j), eot);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }

  std::filesystem::path dir_;
};

TEST_F(HfTokenizerJsonTest, EncodesWithMergesAndAddedTokens) {
  const std::string path = write(TinyBpe().build());
  auto t = make_tokenizer(path);
  EXPECT_EQ(t->name(), path);
  EXPECT_EQ(t->vocab_size(), 256 + 6 + 2);
  EXPECT_EQ(t->eot(), 262);  // <|begin_of_text|>: Llama 3's document start
  // "hello" -> he + ll -> hell, and "hello" is no token: [hell, o]; " world" -> " wor" + l + d.
  EXPECT_EQ(t->encode("hello world"), (Ids{258, 'o', 261, 'l', 'd'}));
  // Added tokens are cut out before pre-tokenization, anywhere in the text.
  EXPECT_EQ(t->encode("hello<|end_of_text|>x<|begin_of_text|>"), (Ids{258, 'o', 263, 'x', 262}));
  EXPECT_EQ(t->encode("<|end_of_text"), (Ids{'<', '|', 'e', 'n', 'd', '_', 'o', 'f', '_', 't', 'e', 'x', 't'}));
  const std::string text = "hello<|end_of_text|> world\n\t12345 日本 🚀";
  EXPECT_EQ(t->decode(t->encode(text)), text);
  EXPECT_EQ(t->clone()->encode(text), t->encode(text));
  EXPECT_EQ(t->decode(Ids{262, 258}), "<|begin_of_text|>hell");
  EXPECT_THROW(t->decode(Ids{264}), Error);
}

TEST_F(HfTokenizerJsonTest, BoundaryTokenByOptionOrPreference) {
  const std::string path = write(TinyBpe().build());
  EXPECT_EQ(make_tokenizer(path, TokenizerOptions{{}, "<|end_of_text|>"})->eot(), 263);
  try {
    make_tokenizer(path, TokenizerOptions{{}, "<eos>"});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'<eos>'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
  TinyBpe gpt_style;
  gpt_style.added = {"<|im_start|>", "<|endoftext|>"};
  EXPECT_EQ(load_hf_tokenizer_json(write(gpt_style.build()))->eot, 263);
  TinyBpe none;
  none.added = {"<pad>"};
  EXPECT_NE(error_of(none.build()).find("--eot"), std::string::npos);
  EXPECT_EQ(load_hf_tokenizer_json(write(none.build()), "<pad>")->eot, 262);
}

TEST_F(HfTokenizerJsonTest, IgnoreMergesTakesWholeTokens) {
  TinyBpe tiny;
  tiny.extra_tokens = {"hello"};  // a token no merge produces
  json j = tiny.build();
  EXPECT_EQ(make_tokenizer(write(j))->encode("hello"), (Ids{258, 'o'}));
  j["model"]["ignore_merges"] = true;
  EXPECT_EQ(make_tokenizer(write(j))->encode("hello"), (Ids{262}));
  EXPECT_EQ(make_tokenizer(write(j))->encode("hello hell"), (Ids{262, ' ', 258}));
}

TEST_F(HfTokenizerJsonTest, MergesAsPairsAndByteLevelPreTokenizer) {
  json strings = TinyBpe().build();
  json pairs = strings;
  for (json& m : pairs["model"]["merges"]) {
    const std::string s = m.get<std::string>();
    m = json::array({s.substr(0, s.find(' ')), s.substr(s.find(' ') + 1)});
  }
  const std::string text = "hello world, hello\n\nworld's 12345";
  EXPECT_EQ(make_tokenizer(write(pairs, "pairs.json"))->encode(text),
            make_tokenizer(write(strings, "strings.json"))->encode(text));
  // GPT-2's layout (ByteLevel with its own regex) splits digits differently.
  json gpt2 = strings;
  gpt2["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  const auto vocab = load_hf_tokenizer_json(write(gpt2, "gpt2.json"));
  EXPECT_EQ(vocab->pretokenizer, PreTokenizer::gpt2);
  EXPECT_EQ(BpeTokenizer(vocab).encode("12345"), (Ids{'1', '2', '3', '4', '5'}));
}

TEST_F(HfTokenizerJsonTest, UnsupportedOrMalformedFieldsAreNamed) {
  const json good = TinyBpe().build();
  const auto expect_error = [&](json j, const std::string& field) {
    const std::string message = error_of(j);
    EXPECT_NE(message.find(field), std::string::npos) << "field " << field << ": " << message;
    EXPECT_NE(message.find((dir_ / "tokenizer.json").string()), std::string::npos) << message;
  };
  json j = good;
  j["model"]["type"] = "WordPiece";
  expect_error(j, "model.type");
  j = good;
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\w+|\\s+";
  expect_error(j, "pre_tokenizer.pretokenizers[0].pattern");
  j = good;
  j["pre_tokenizer"] = {{"type", "Whitespace"}};
  expect_error(j, "pre_tokenizer.type");
  j = good;
  j["pre_tokenizer"]["pretokenizers"][1]["use_regex"] = true;
  expect_error(j, "pre_tokenizer.pretokenizers[1].use_regex");
  j = good;
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}};
  expect_error(j, "pre_tokenizer.add_prefix_space");
  j = good;
  j["normalizer"] = {{"type", "NFC"}};
  expect_error(j, "normalizer");
  j = good;
  j["model"]["byte_fallback"] = true;
  expect_error(j, "model.byte_fallback");
  j = good;
  j["model"]["merges"][3] = "q z";  // "qz" is not a token
  expect_error(j, "model.merges[3]");
  j = good;
  j["model"]["vocab"].erase(bytes_to_byte_level("\n"));
  expect_error(j, "model.vocab");
  j = good;
  j["model"].erase("merges");
  expect_error(j, "model.merges");
  j = good;
  j["added_tokens"][0]["id"] = 3;  // the id of byte 3
  expect_error(j, "added_tokens");
  std::ofstream(dir_ / "broken.json") << "{\"model\": ";
  EXPECT_THROW(make_tokenizer((dir_ / "broken.json").string()), Error);
  EXPECT_THROW(make_tokenizer((dir_ / "missing.json").string()), Error);
}

TEST(TokenizerSpec, NamesAndFiles) {
  EXPECT_NO_THROW(check_tokenizer_spec("gpt2", "x"));
  EXPECT_NO_THROW(check_tokenizer_spec("models/llama3/tokenizer.json", "x"));
  EXPECT_NO_THROW(check_tokenizer_spec("tokenizer.model", "x"));
  try {
    check_tokenizer_spec("llama", "config key 'data.tokenizer' =");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("config key 'data.tokenizer' = 'llama'"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("tokenizer.json"), std::string::npos);
  }
}

}  // namespace
}  // namespace aiscale::data
