#include "aiscale/core/config_origins.h"

#include <algorithm>
#include <cctype>
#include <mutex>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>


namespace aiscale::config {
namespace {

std::mutex g_mutex;
std::map<std::string, std::string>& option_origins() {
  static std::map<std::string, std::string> m;
  return m;
}

bool key_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.'; }

// Where `key` stands in `text` as a whole key (not inside a longer one), or npos.
size_t find_key_in(const std::string& text, const std::string& key) {
  for (size_t at = text.find(key); at != std::string::npos; at = text.find(key, at + 1)) {
    const size_t end = at + key.size();
    const bool before_ok = at == 0 || !key_char(text[at - 1]);
    // A key may end a sentence ("... train.steps."), but not continue ("train.steps_x").
    const bool after_ok = end == text.size() || !key_char(text[end]) ||
                          (text[end] == '.' && (end + 1 == text.size() || !key_char(text[end + 1])));
    if (before_ok && after_ok) return at;
  }
  return std::string::npos;
}

}  // namespace

void name_override_origin(const std::string& override_text, const std::string& origin) {
  std::lock_guard<std::mutex> lock(g_mutex);
  option_origins()[override_text] = origin;
}

std::string override_origin(const std::string& o) {
  std::lock_guard<std::mutex> lock(g_mutex);
  const auto it = option_origins().find(o);
  return it != option_origins().end() ? it->second : "--set " + o;
}

std::string node_origin(const toml::node& n, const std::string& source, bool from_file) {
  return from_file && n.source().begin.line > 0 ? fmt::format("{}:{}", source, n.source().begin.line)
                                                : source;
}

std::string with_origins(const std::string& message, const std::string& source, const Origins& origins) {
  const std::string prefix = source + ": ";
  if (message.rfind(prefix, 0) != 0) return message;
  const std::string body = message.substr(prefix.size());
  std::vector<std::pair<size_t, std::string>> named;  // where in the message, origin
  for (const auto& [key, origin] : origins)
    if (const size_t at = find_key_in(body, key); at != std::string::npos) named.emplace_back(at, origin);
  if (named.empty()) return message;
  std::sort(named.begin(), named.end());
  std::vector<std::string> where;
  for (const auto& [at, origin] : named)
    if (std::find(where.begin(), where.end(), origin) == where.end()) where.push_back(origin);
  return fmt::format("{}: {}", fmt::join(where, ", "), body);
}

}  // namespace aiscale::config
