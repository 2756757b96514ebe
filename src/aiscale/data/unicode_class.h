// Unicode character classes used by the GPT-2 pre-tokenizer: letter (\p{L}), number
// (\p{N}) and whitespace (\s), plus a lenient UTF-8 decoder.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>

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

}  // namespace aiscale::data::unicode
