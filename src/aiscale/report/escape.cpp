#include "aiscale/report/escape.h"

namespace aiscale::report {

std::string replace_chars(std::string_view text,
                          std::initializer_list<std::pair<char, std::string_view>> replacements) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    const auto* r = replacements.begin();
    while (r != replacements.end() && r->first != c) ++r;
    if (r == replacements.end())
      out += c;
    else
      out += r->second;
  }
  return out;
}

}  // namespace aiscale::report
