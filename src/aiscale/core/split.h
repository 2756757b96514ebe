// A text cut at a separator: lines, NUL-separated words.
#pragma once
#include <string_view>
#include <vector>

namespace aiscale {

// The pieces of `text` between `separator`s, in order; a separator at the very end starts
// no further piece ("a\nb\n" and "a\nb": "a", "b"; "": none). The views point into `text`.
inline std::vector<std::string_view> split(std::string_view text, char separator) {
  std::vector<std::string_view> pieces;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find(separator, start);
    if (end == std::string_view::npos) end = text.size();
    pieces.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return pieces;
}

}  // namespace aiscale
