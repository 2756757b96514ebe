// Character escapes for the report's output formats (HTML, JSON in a script element,
// Markdown table cells).
#pragma once
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

namespace aiscale::report {

// `text` with each character that `replacements` names written as its replacement.
std::string replace_chars(std::string_view text,
                          std::initializer_list<std::pair<char, std::string_view>> replacements);

}  // namespace aiscale::report
