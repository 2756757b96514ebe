// GPT-2's pre-tokenizer: splits text into the pieces that BPE then encodes one by one.
// A hand-written matcher equivalent to the regular expression
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// applied repeatedly from the start of the text (leftmost alternative wins, as in a
// backtracking regex engine). Character classes come from unicode_class.h.
#pragma once
#include <string_view>
#include <vector>

namespace aiscale::data {

// Appends the pieces of `text` to `pieces` (views into `text`). The pieces cover the
// text exactly: concatenated they give `text` back, byte for byte, including bytes
// that are not valid UTF-8 (each such byte counts as a punctuation character).
void gpt2_pretokenize(std::string_view text, std::vector<std::string_view>& pieces);

}  // namespace aiscale::data
