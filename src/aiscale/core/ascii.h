// ASCII case folding for names matched without regard to case (devices, precisions,
// system ids, file extensions); bytes outside A-Z are kept as they are.
#pragma once
#include <algorithm>
#include <cctype>
#include <string>
#include <string_view>

namespace aiscale {

inline std::string ascii_lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  return out;
}

}  // namespace aiscale
