// Llama 3's pre-tokenizer (also OpenAI's cl100k family): splits text into the pieces
// that BPE encodes one by one. A hand-written matcher equivalent to the regular
// expression in Llama 3's tokenizer.json
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//    ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
// applied repeatedly from the start of the text (leftmost alternative wins, as in a
// backtracking regex engine). Character classes come from unicode_class.h.
#pragma once
#include <string_view>
#include <vector>

namespace aiscale::data {

// The pattern exactly as tokenizer.json files spell it (for recognising it).
inline constexpr std::string_view kLlama3Pattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

// Appends the pieces of `text` to `pieces` (views into `text`); they cover the text
// exactly. A byte that is not part of valid UTF-8 counts as a punctuation character.
// The contractions are matched ignoring ASCII case ("'S", "'Ll") and with U+017F (long
// s), which Unicode case folding maps to 's'.
void llama3_pretokenize(std::string_view text, std::vector<std::string_view>& pieces);

}  // namespace aiscale::data
