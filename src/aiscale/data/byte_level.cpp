// GPT-2's byte-to-unicode alphabet; see byte_level.h.
#include "aiscale/data/byte_level.h"

#include <array>

#include "aiscale/data/unicode_class.h"

namespace aiscale::data {
namespace {

// GPT-2's bytes_to_unicode(): printable Latin-1 bytes ('!'..'~', '¡'..'¬', '®'..'ÿ')
// stand for themselves; the other 68 bytes, in increasing order, are represented by the
// code points 256, 257, ...
const std::array<char32_t, 256>& byte_to_code_point() {
  static const std::array<char32_t, 256> table = [] {
    std::array<char32_t, 256> t{};
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      t[b] = printable ? static_cast<char32_t>(b) : next++;
    }
    return t;
  }();
  return table;
}

// The inverse; -1 for any other code point.
int code_point_to_byte(char32_t c) {
  static const std::array<int, 256 + 68> table = [] {
    std::array<int, 256 + 68> t;
    t.fill(-1);
    for (int b = 0; b < 256; ++b) t[byte_to_code_point()[b]] = b;
    return t;
  }();
  return c < table.size() ? table[c] : -1;
}

}  // namespace

bool byte_level_to_bytes(std::string_view mapped, std::string& bytes) {
  bytes.clear();
  for (size_t pos = 0; pos < mapped.size();) {
    size_t length = 0;
    const int b = code_point_to_byte(unicode::decode_utf8(mapped, pos, length));
    if (b < 0) return false;
    bytes.push_back(static_cast<char>(b));
    pos += length;
  }
  return true;
}

std::string bytes_to_byte_level(std::string_view bytes) {
  std::string out;
  for (unsigned char b : bytes) {
    const char32_t c = byte_to_code_point()[b];  // < 0x800: one or two UTF-8 bytes
    if (c < 0x80) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back(static_cast<char>(0xC0 | (c >> 6)));
      out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    }
  }
  return out;
}

}  // namespace aiscale::data
