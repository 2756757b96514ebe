// The GPT-2 pre-tokenizer as a hand-written scanner; see gpt2_pretokenize.h.
#include "aiscale/data/gpt2_pretokenize.h"

#include <array>

#include "aiscale/data/unicode_class.h"

namespace aiscale::data {
namespace {

enum class CharClass { letter, number, space, other };

CharClass classify(char32_t c) {
  if (unicode::is_letter(c)) return CharClass::letter;
  if (unicode::is_number(c)) return CharClass::number;
  if (unicode::is_space(c)) return CharClass::space;
  return CharClass::other;  // punctuation, symbols, marks, controls, invalid bytes
}

struct Scanner {
  std::string_view text;

  // Class of the character at byte offset `pos` and its byte length.
  CharClass at(size_t pos, size_t& length) const {
    return classify(unicode::decode_utf8(text, pos, length));
  }

  // End of the run of characters of class `cls` starting at `pos`.
  size_t run_end(size_t pos, CharClass cls) const {
    size_t length = 0;
    while (pos < text.size() && at(pos, length) == cls) pos += length;
    return pos;
  }

  // Length of a contraction ('s 't 're 've 'm 'll 'd) at `pos`, or 0. Case-sensitive,
  // no look-ahead: "'sa" yields "'s", exactly like the regex.
  size_t contraction(size_t pos) const {
    if (text[pos] != '\'') return 0;
    static constexpr std::array<std::string_view, 7> kSuffixes = {"s", "t", "re", "ve",
                                                                 "m", "ll", "d"};
    const std::string_view rest = text.substr(pos + 1);
    for (std::string_view suffix : kSuffixes)
      if (rest.starts_with(suffix)) return 1 + suffix.size();
    return 0;
  }

  // End of the piece that starts at `pos` (pos < text.size()).
  size_t piece_end(size_t pos) const {
    if (size_t n = contraction(pos)) return pos + n;
    size_t length = 0;
    CharClass cls = at(pos, length);
    // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`: an optional single ASCII space
    // joins the run that follows it.
    size_t start = pos;
    if (text[pos] == ' ' && pos + 1 < text.size()) {
      size_t next_length = 0;
      CharClass next = at(pos + 1, next_length);
      if (next != CharClass::space) {
        cls = next;
        start = pos + 1;
      }
    }
    if (cls != CharClass::space) return run_end(start, cls);
    // A whitespace run.
    size_t last_start = pos;
    size_t end = pos;
    while (end < text.size() && at(end, length) == CharClass::space) {
      last_start = end;
      end += length;
    }
    return unicode::space_run_end(text, pos, end, last_start);
  }
};

}  // namespace

void gpt2_pretokenize(std::string_view text, std::vector<std::string_view>& pieces) {
  unicode::split_pieces<Scanner>(text, pieces);
}

}  // namespace aiscale::data
