// Llama 3's pre-tokenizer against hand-checked splits of its regular expression.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "aiscale/core/rng.h"
#include "aiscale/data/llama3_pretokenize.h"

namespace aiscale::data {
namespace {

using Pieces = std::vector<std::string>;

Pieces pieces(std::string_view text) {
  std::vector<std::string_view> views;
  llama3_pretokenize(text, views);
  return {views.begin(), views.end()};
}

TEST(Llama3Pretokenize, HandCheckedSplits) {
  EXPECT_EQ(pieces("Hello world"), (Pieces{"Hello", " world"}));
  // Contractions, in any case (the pattern's (?i:...)); 'x is not one.
  EXPECT_EQ(pieces("I'm HERE'S"), (Pieces{"I", "'m", " HERE", "'S"}));
  EXPECT_EQ(pieces("it'Ll we'VE"), (Pieces{"it", "'Ll", " we", "'VE"}));
  EXPECT_EQ(pieces("don't 'tis"), (Pieces{"don", "'t", " '", "tis"}));
  EXPECT_EQ(pieces("'tis"), (Pieces{"'t", "is"}));
  EXPECT_EQ(pieces("it'\xC5\xBF"), (Pieces{"it", "'\xC5\xBF"}));  // U+017F folds to 's'
  EXPECT_EQ(pieces("'xyz"), (Pieces{"'xyz"}));
  // Digits in groups of at most three, never joined to a space or letters.
  EXPECT_EQ(pieces("12345"), (Pieces{"123", "45"}));
  EXPECT_EQ(pieces(" 12"), (Pieces{" ", "12"}));
  EXPECT_EQ(pieces("1.5kg"), (Pieces{"1", ".", "5", "kg"}));
  EXPECT_EQ(pieces("abc123def"), (Pieces{"abc", "123", "def"}));
  EXPECT_EQ(pieces("x = 42;"), (Pieces{"x", " =", " ", "42", ";"}));
  EXPECT_EQ(pieces("$100"), (Pieces{"$", "100"}));
  // One non-letter, non-digit, non-newline character joins the letters after it.
  EXPECT_EQ(pieces("(hello)"), (Pieces{"(hello", ")"}));
  EXPECT_EQ(pieces("\thello"), (Pieces{"\thello"}));
  EXPECT_EQ(pieces("a\xc2\xa0" "b"), (Pieces{"a", "\xc2\xa0" "b"}));  // no-break space
  EXPECT_EQ(pieces("__init__"), (Pieces{"__", "init", "__"}));
  EXPECT_EQ(pieces("\nhello"), (Pieces{"\n", "hello"}));
  // Punctuation keeps an optional leading space and the newlines after it.
  EXPECT_EQ(pieces(" !!?\n"), (Pieces{" !!?\n"}));
  EXPECT_EQ(pieces("end.\n\nNext"), (Pieces{"end", ".\n\n", "Next"}));
  // Whitespace: up to the last newline of a run, else a run leaves its last space to
  // the next piece.
  EXPECT_EQ(pieces("hello\n\nworld"), (Pieces{"hello", "\n\n", "world"}));
  EXPECT_EQ(pieces("a\r\nb"), (Pieces{"a", "\r\n", "b"}));
  EXPECT_EQ(pieces("x  \n  y"), (Pieces{"x", "  \n", " ", " y"}));
  EXPECT_EQ(pieces("  \t\n\n  end"), (Pieces{"  \t\n\n", " ", " end"}));
  EXPECT_EQ(pieces("x\n "), (Pieces{"x", "\n", " "}));
  EXPECT_EQ(pieces("a   b"), (Pieces{"a", "  ", " b"}));
  EXPECT_EQ(pieces("end   "), (Pieces{"end", "   "}));
  EXPECT_EQ(pieces(" "), (Pieces{" "}));
  // Other scripts and symbols.
  EXPECT_EQ(pieces("日本語 テキスト"), (Pieces{"日本語", " テキスト"}));
  EXPECT_EQ(pieces("🚀🔥 ok"), (Pieces{"🚀🔥", " ok"}));
  EXPECT_EQ(pieces("café ünï"), (Pieces{"café", " ünï"}));
  EXPECT_EQ(pieces("١٢٣٤"), (Pieces{"١٢٣", "٤"}));
  EXPECT_TRUE(pieces("").empty());
}

// Random byte strings: the pieces cover the text exactly and none is empty.
TEST(Llama3Pretokenize, PiecesCoverAnyBytes) {
  Rng rng(7);
  const std::vector<std::string> parts = {"a", "Z", "9", "'", "s", "L", " ", "  ", "\n", "\r",
                                          "\t", ".", "!", "é", "中", "🚀", "\xff", "\xc3", "\xc2\xa0"};
  for (int trial = 0; trial < 500; ++trial) {
    std::string text;
    for (int i = 0, n = static_cast<int>(rng.below(30)); i < n; ++i) text += parts[rng.below(parts.size())];
    std::vector<std::string_view> views;
    llama3_pretokenize(text, views);
    std::string joined;
    for (std::string_view v : views) {
      ASSERT_FALSE(v.empty()) << text;
      joined += v;
    }
    ASSERT_EQ(joined, text);
  }
}

}  // namespace
}  // namespace aiscale::data
