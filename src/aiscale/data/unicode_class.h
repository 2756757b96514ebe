// Unicode character classes used by the GPT-2 pre-tokenizer: letter (\p{L}), number
// (\p{N}) and whitespace (\s), plus a lenient UTF-8 decoder.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace aiscale::data::unicode {

// General category L (Lu, Ll, Lt, Lm, Lo) per the Unicode 17 tables in unicode_class.cpp.
bool is_letter(char32_t c);
// General category N (Nd, Nl, No).
bool is_number(char32_t c);
// The White_Space property (what Python's `regex` module matches with \s).
bool is_space(char32_t c);

// Marks a byte that is not part of valid UTF-8; it is its own "character" and is
// classified as neither letter, number nor space (i.e. punctuation-like).
inline constexpr char32_t kInvalidByte = 0xFFFFFFFF;

// Decodes the code point starting at text[pos]; sets `length` to its byte length (1..4).
// Invalid or truncated sequences, overlong forms and surrogates decode as kInvalidByte
// with length 1, so every byte of the input belongs to exactly one character.
char32_t decode_utf8(std::string_view text, size_t pos, size_t& length);

// Where a piece of whitespace ends in the GPT-2 and Llama 3 patterns (`\s+(?!\S)` then
// `\s+`): the run [pos, run_end), whose last character starts at last_start, is taken whole
// at the end of the text; before a non-space character the regex backtracks by one character
// so that the last space can join the next word (" word"), unless the run is one character.
inline size_t space_run_end(std::string_view text, size_t pos, size_t run_end, size_t last_start) {
  if (run_end == text.size() || last_start == pos) return run_end;
  return last_start;
}

// A pre-tokenizer's pieces: `Scanner{text}.piece_end(pos)` is where the piece starting at
// pos ends (the GPT-2 and Llama 3 patterns, each its own scanner); every byte of the text
// belongs to one piece, in order.
template <class Scanner>
void split_pieces(std::string_view text, std::vector<std::string_view>& pieces) {
  const Scanner scanner{text};
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t end = scanner.piece_end(pos);
    pieces.push_back(text.substr(pos, end - pos));
    pos = end;
  }
}

}  // namespace aiscale::data::unicode
