// GPT-2 BPE and byte tokenizers: known ids, round trips, the pre-tokenizer, errors.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "aiscale/core/error.h"
#include "aiscale/core/rng.h"
#include "aiscale/data/gpt2_pretokenize.h"
#include "aiscale/data/tokenizer.h"
#include "aiscale/data/unicode_class.h"

namespace aiscale::data {
namespace {

// One tokenizer for the whole suite (loading the vocabulary takes a moment). The
// vocabulary is installed by scripts/setup.sh, so its absence is a failure, not a skip.
BpeTokenizer& gpt2() {
  static std::unique_ptr<BpeTokenizer> tokenizer = [] {
    const std::filesystem::path dir = default_gpt2_vocab_dir();
    EXPECT_TRUE(std::filesystem::exists(dir / "encoder.json"))
        << "GPT-2 vocabulary missing at " << dir << ": run `bash scripts/setup.sh` or set "
        << "AISCALE_GPT2_VOCAB_DIR";
    return std::make_unique<BpeTokenizer>(dir);
  }();
  return *tokenizer;
}

using Ids = std::vector<int32_t>;

TEST(Gpt2Tokenizer, VocabularyShape) {
  EXPECT_EQ(gpt2().vocab_size(), 50257);
  EXPECT_EQ(gpt2().eot(), 50256);
  EXPECT_EQ(gpt2().name(), "gpt2");
}

// Ids from GPT-2's encoder (checked against the gpt-3-encoder npm package).
TEST(Gpt2Tokenizer, KnownIds) {
  auto& t = gpt2();
  EXPECT_EQ(t.encode("Hello world"), (Ids{15496, 995}));
  EXPECT_EQ(t.encode(" Hello"), (Ids{18435}));
  EXPECT_EQ(t.encode("Hello world!"), (Ids{15496, 995, 0}));
  EXPECT_EQ(t.encode("The quick brown fox jumps over the lazy dog."),
            (Ids{464, 2068, 7586, 21831, 18045, 625, 262, 16931, 3290, 13}));
  EXPECT_EQ(t.encode("I'm sure they'll say it's fine, we've done what we'd do."),
            (Ids{40, 1101, 1654, 484, 1183, 910, 340, 338, 3734, 11, 356, 1053, 1760, 644, 356,
                 1549, 466, 13}));
  EXPECT_EQ(t.encode("  leading spaces and   runs\n\n\ttabs"),
            (Ids{220, 3756, 9029, 290, 220, 220, 4539, 628, 197, 8658, 82}));
  EXPECT_EQ(t.encode("naïve café résumé"), (Ids{2616, 38776, 40304, 40560, 16345, 2634}));
  EXPECT_EQ(t.encode("Привет, мир!"),
            (Ids{140, 253, 21169, 18849, 38857, 16843, 20375, 11, 12466, 120, 18849, 21169, 0}));
  EXPECT_EQ(t.encode("日本語のテキスト"),
            (Ids{33768, 98, 17312, 105, 45739, 252, 5641, 24336, 25084, 43302}));
  EXPECT_EQ(t.encode("emoji 🚀🔥 done"), (Ids{368, 31370, 12520, 248, 222, 8582, 242, 98, 1760}));
  EXPECT_EQ(t.encode("x = 3.14159 + 42;"), (Ids{87, 796, 513, 13, 1415, 19707, 1343, 5433, 26}));
  // The end-of-text marker written as text is ordinary text, not token 50256.
  EXPECT_EQ(t.encode("<|endoftext|>"), (Ids{27, 91, 437, 1659, 5239, 91, 29}));
  // Merges may start with '#' (vocab.bpe has "# #" and "## ##" right after its header).
  EXPECT_EQ(t.encode("####"), (Ids{4242}));
  EXPECT_EQ(t.encode("## Heading"), (Ids{2235, 679, 4980}));
  EXPECT_EQ(t.encode("#include <stdio.h>"), (Ids{2, 17256, 1279, 19282, 952, 13, 71, 29}));
  EXPECT_EQ(t.encode("HELLO'S 'tis"), (Ids{13909, 3069, 46, 6, 50, 705, 48010}));
  EXPECT_EQ(t.encode("a\n\nb"), (Ids{64, 198, 198, 65}));
  EXPECT_EQ(t.encode("1234567890"), (Ids{10163, 2231, 30924, 3829}));
  EXPECT_EQ(t.encode("hello   "), (Ids{31373, 220, 220, 220}));
  EXPECT_EQ(t.encode("١٢٣ numbers"), (Ids{149, 94, 149, 95, 149, 96, 3146}));
  EXPECT_TRUE(t.encode("").empty());
}

TEST(Gpt2Tokenizer, EncodeIsStableAcrossCacheAndClones) {
  auto& t = gpt2();
  const std::string text = "Repeated words repeated words Repeated words.";
  const Ids first = t.encode(text);
  EXPECT_EQ(t.encode(text), first);  // now from the cache
  auto clone = t.clone();
  EXPECT_EQ(clone->encode(text), first);
}

TEST(Gpt2Tokenizer, RoundTrips) {
  auto& t = gpt2();
  const std::vector<std::string> texts = {
      "Hello world",
      "It's, I'm, you're, we've, they'll, he'd, she's 'quoted' ''double''",
      "Whitespace:   three,\t\ttabs,\n\n\nnewlines, trailing   ",
      "   \n  \n",
      "Ünïcödé: naïve façade, Straße, ǅemal, Ελληνικά, русский, עברית, العربية, हिन्दी",
      "CJK 中文字符 日本語 한국어",
      "Emoji: 😀👍🏽 👨‍👩‍👧‍👦 🇪🇺 and symbols ∑∫√∞ ≠ ≤ €£¥",
      "Numbers 0123 ٣٤٥ ⅣⅫ ½ ²³ 1,000,000.50",
      "Code: for (int i = 0; i < n; ++i) { a[i] += b[i] * 2; }  // comment",
      "Control \x01\x02\x7f bytes and a form\x0c feed",
      std::string("embedded\0nul", 12),
      "Mixed\r\nline\rendings\n",
      "Long run: " + std::string(500, '=') + " and " + std::string(300, ' ') + "end",
  };
  for (const std::string& text : texts) EXPECT_EQ(t.decode(t.encode(text)), text) << text;
}

TEST(Gpt2Tokenizer, InvalidUtf8RoundTripsByteForByte) {
  auto& t = gpt2();
  const std::string text = "bad \xff\xfe bytes \xc3 truncated \xe2\x82 and lone \x80 end\xf0";
  EXPECT_EQ(t.decode(t.encode(text)), text);
}

// Random byte strings (mostly ASCII with spaces, some multi-byte and invalid UTF-8):
// pieces cover the text exactly and decode(encode(x)) == x.
TEST(Gpt2Tokenizer, RandomBytesRoundTrip) {
  auto& t = gpt2();
  Rng rng(2024);
  const std::string alphabet = "ab Z9'.,!\n\t  ";
  const std::vector<std::string> extras = {"é", "Ж", "中", "🚀", "\xff", "\xc3", "\x80", "\xa0"};
  for (int trial = 0; trial < 300; ++trial) {
    std::string text;
    const int length = static_cast<int>(rng.below(60));
    for (int i = 0; i < length; ++i) {
      if (rng.below(5) == 0)
        text += extras[rng.below(extras.size())];
      else
        text += alphabet[rng.below(alphabet.size())];
    }
    std::vector<std::string_view> views;
    gpt2_pretokenize(text, views);
    std::string joined;
    for (std::string_view v : views) {
      EXPECT_FALSE(v.empty());
      joined += v;
    }
    ASSERT_EQ(joined, text);
    ASSERT_EQ(t.decode(t.encode(text)), text);
  }
}

TEST(Gpt2Tokenizer, DecodeSpecialAndErrors) {
  auto& t = gpt2();
  EXPECT_EQ(t.decode(Ids{50256}), "<|endoftext|>");
  EXPECT_EQ(t.decode(Ids{15496, 995}), "Hello world");
  EXPECT_THROW(t.decode(Ids{50257}), Error);
  EXPECT_THROW(t.decode(Ids{-1}), Error);
}

TEST(Gpt2Tokenizer, MissingVocabularyNamesPathAndFix) {
  const std::filesystem::path dir = "/nonexistent/aiscale-vocab";
  try {
    BpeTokenizer tokenizer(dir);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("/nonexistent/aiscale-vocab/encoder.json"), std::string::npos) << message;
    EXPECT_NE(message.find("scripts/setup.sh"), std::string::npos) << message;
  }
}

TEST(Tokenizer, FactoryByName) {
  EXPECT_EQ(make_tokenizer("byte")->name(), "byte");
  EXPECT_EQ(make_tokenizer("gpt2", default_gpt2_vocab_dir())->name(), "gpt2");
  EXPECT_THROW(make_tokenizer("sentencepiece"), Error);
}

TEST(ByteTokenizer, EncodeDecode) {
  ByteTokenizer t;
  EXPECT_EQ(t.vocab_size(), 256);
  EXPECT_EQ(t.eot(), 0);
  EXPECT_EQ(t.encode("Hi!"), (Ids{72, 105, 33}));
  EXPECT_EQ(t.encode("\xc3\xa9"), (Ids{0xc3, 0xa9}));
  const std::string text = "bytes: \xff\x01 ünï 🚀\n";
  EXPECT_EQ(t.decode(t.encode(text)), text);
  EXPECT_EQ(t.decode(Ids{0}), "<|endoftext|>");
  EXPECT_THROW(t.decode(Ids{256}), Error);
}

std::vector<std::string> pieces(std::string_view text) {
  std::vector<std::string_view> views;
  gpt2_pretokenize(text, views);
  return {views.begin(), views.end()};
}

using Pieces = std::vector<std::string>;

TEST(Gpt2Pretokenize, MatchesTheRegex) {
  EXPECT_EQ(pieces("Hello world"), (Pieces{"Hello", " world"}));
  EXPECT_EQ(pieces("I'm here"), (Pieces{"I", "'m", " here"}));
  EXPECT_EQ(pieces("'sa 'S"), (Pieces{"'s", "a", " '", "S"}));
  EXPECT_EQ(pieces("a   b"), (Pieces{"a", "  ", " b"}));
  EXPECT_EQ(pieces("a \n b"), (Pieces{"a", " \n", " b"}));
  EXPECT_EQ(pieces("a\tb"), (Pieces{"a", "\t", "b"}));
  EXPECT_EQ(pieces("end   "), (Pieces{"end", "   "}));
  EXPECT_EQ(pieces("x+=42!?"), (Pieces{"x", "+=", "42", "!?"}));
  EXPECT_EQ(pieces("abc123def"), (Pieces{"abc", "123", "def"}));
  EXPECT_EQ(pieces(" !!"), (Pieces{" !!"}));
  EXPECT_EQ(pieces("?'s"), (Pieces{"?'", "s"}));
  EXPECT_EQ(pieces("café ünï"), (Pieces{"café", " ünï"}));
  EXPECT_EQ(pieces("日本 語"), (Pieces{"日本", " 語"}));
  EXPECT_EQ(pieces("🚀🔥 ok"), (Pieces{"🚀🔥", " ok"}));
  // U+00A0 (no-break space) is \s but not ' ': it does not join the next word.
  EXPECT_EQ(pieces("a\xc2\xa0" "b"), (Pieces{"a", "\xc2\xa0", "b"}));
  EXPECT_TRUE(pieces("").empty());
}

TEST(UnicodeClass, Classification) {
  using namespace unicode;
  EXPECT_TRUE(is_letter(U'a') && is_letter(U'Z') && is_letter(U'é') && is_letter(U'ß'));
  EXPECT_TRUE(is_letter(U'Ж') && is_letter(U'λ') && is_letter(U'中') && is_letter(U'ª'));
  EXPECT_FALSE(is_letter(U'1') || is_letter(U' ') || is_letter(U'!') || is_letter(U'×'));
  EXPECT_TRUE(is_number(U'7') && is_number(U'٣') && is_number(U'½') && is_number(U'²') &&
              is_number(U'Ⅻ'));
  EXPECT_FALSE(is_number(U'a') || is_number(U'.'));
  EXPECT_TRUE(is_space(U' ') && is_space(U'\n') && is_space(0xA0) && is_space(0x3000) &&
              is_space(0x85));
  EXPECT_FALSE(is_space(U'x') || is_space(0x200B));
  EXPECT_FALSE(is_letter(kInvalidByte) || is_number(kInvalidByte) || is_space(kInvalidByte));
}

TEST(UnicodeClass, DecodeUtf8) {
  using namespace unicode;
  size_t length = 0;
  EXPECT_EQ(decode_utf8("A", 0, length), U'A');
  EXPECT_EQ(length, 1u);
  EXPECT_EQ(decode_utf8("\xc3\xa9", 0, length), U'é');
  EXPECT_EQ(length, 2u);
  EXPECT_EQ(decode_utf8("\xf0\x9f\x9a\x80", 0, length), U'🚀');
  EXPECT_EQ(length, 4u);
  EXPECT_EQ(decode_utf8("\xc3", 0, length), kInvalidByte);  // truncated
  EXPECT_EQ(length, 1u);
  EXPECT_EQ(decode_utf8("\xc0\xaf", 0, length), kInvalidByte);  // overlong '/'
  EXPECT_EQ(decode_utf8("\xed\xa0\x80", 0, length), kInvalidByte);  // surrogate
  EXPECT_EQ(decode_utf8("\x80", 0, length), kInvalidByte);
}

}  // namespace
}  // namespace aiscale::data
