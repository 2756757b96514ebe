// Llama 3's pre-tokenizer as a hand-written scanner; see llama3_pretokenize.h.
#include "aiscale/data/llama3_pretokenize.h"

#include "aiscale/data/unicode_class.h"

namespace aiscale::data {
namespace {

enum class CharClass { letter, number, newline, space, other };

CharClass classify(char32_t c) {
  if (c == U'\r' || c == U'\n') return CharClass::newline;  // also \s
  if (unicode::is_letter(c)) return CharClass::letter;
  if (unicode::is_number(c)) return CharClass::number;
  if (unicode::is_space(c)) return CharClass::space;
  return CharClass::other;  // punctuation, symbols, marks, controls, invalid bytes
}

bool is_space_class(CharClass cls) { return cls == CharClass::space || cls == CharClass::newline; }

struct Scanner {
  std::string_view text;

  CharClass at(size_t pos, size_t& length) const {
    return classify(unicode::decode_utf8(text, pos, length));
  }

  // The character at `pos` is the contraction letter `lower` (ASCII, any case; 's' also
  // as U+017F): its byte length, else 0.
  size_t letter_at(size_t pos, char lower) const {
    if (pos >= text.size()) return 0;
    const char c = text[pos];
    if (c == lower || c == lower - 'a' + 'A') return 1;
    if (lower == 's' && text.substr(pos).starts_with("\xC5\xBF")) return 2;
    return 0;
  }

  // `(?i:'s|'t|'re|'ve|'m|'ll|'d)` at `pos`: its length, or 0.
  size_t contraction(size_t pos) const {
    if (text[pos] != '\'') return 0;
    const size_t next = pos + 1;
    for (char single : {'s', 't'})
      if (size_t n = letter_at(next, single)) return 1 + n;
    for (const char* pair : {"re", "ve"})
      if (size_t a = letter_at(next, pair[0]))
        if (size_t b = letter_at(next + a, pair[1])) return 1 + a + b;
    if (size_t n = letter_at(next, 'm')) return 1 + n;
    if (size_t a = letter_at(next, 'l'))
      if (size_t b = letter_at(next + a, 'l')) return 1 + a + b;
    if (size_t n = letter_at(next, 'd')) return 1 + n;
    return 0;
  }

  // End of the run of characters matching `pred` from `pos`.
  template <class Pred>
  size_t run_end(size_t pos, Pred pred) const {
    size_t length = 0;
    while (pos < text.size() && pred(at(pos, length))) pos += length;
    return pos;
  }

  size_t piece_end(size_t pos) const {
    if (size_t n = contraction(pos)) return pos + n;
    size_t length = 0;
    const CharClass cls = at(pos, length);
    const size_t next = pos + length;
    size_t next_length = 0;
    const bool has_next = next < text.size();
    const CharClass next_cls = has_next ? at(next, next_length) : CharClass::other;
    const auto letters = [](CharClass c) { return c == CharClass::letter; };
    // `[^\r\n\p{L}\p{N}]?\p{L}+`: one optional character that is neither newline, letter
    // nor number (a space, a tab, punctuation) joins the letters that follow it.
    if (cls == CharClass::letter) return run_end(pos, letters);
    if (cls != CharClass::newline && cls != CharClass::number && has_next &&
        next_cls == CharClass::letter)
      return run_end(next, letters);
    // `\p{N}{1,3}`
    if (cls == CharClass::number) {
      size_t end = next;
      for (int count = 1; count < 3 && end < text.size() && at(end, length) == CharClass::number; ++count)
        end += length;
      return end;
    }
    // ` ?[^\s\p{L}\p{N}]+[\r\n]*`: punctuation, with one optional leading ASCII space,
    // and the newlines right after it.
    const auto others = [](CharClass c) { return c == CharClass::other; };
    const auto newlines = [](CharClass c) { return c == CharClass::newline; };
    if (cls == CharClass::other) return run_end(run_end(pos, others), newlines);
    if (text[pos] == ' ' && has_next && next_cls == CharClass::other)
      return run_end(run_end(next, others), newlines);
    // Whitespace from here on. `\s*[\r\n]+`: the run up to and including its last newline.
    size_t run = pos, last_newline_end = 0, last_start = pos;
    while (run < text.size()) {
      const CharClass c = at(run, length);
      if (!is_space_class(c)) break;
      last_start = run;
      run += length;
      if (c == CharClass::newline) last_newline_end = run;
    }
    if (last_newline_end != 0) return last_newline_end;
    return unicode::space_run_end(text, pos, run, last_start);
  }
};

}  // namespace

void llama3_pretokenize(std::string_view text, std::vector<std::string_view>& pieces) {
  unicode::split_pieces<Scanner>(text, pieces);
}

}  // namespace aiscale::data
