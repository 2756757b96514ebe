#include "aiscale/core/toml_errors.h"

#include <limits>
#include <vector>

#include <fmt/format.h>

#include "aiscale/core/validate.h"

namespace aiscale {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

std::vector<std::string_view> lines_of(std::string_view text) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    out.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

bool number_char(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') || c == '_' ||
         c == '+' || c == '-' || c == 'x' || c == 'o';
}

}  // namespace

std::optional<std::string> toml_integer_out_of_range(
    const toml::parse_error& e, std::string_view text, std::string_view source,
    const std::function<IntRange(const std::string& key)>& range_of) {
  if (std::string_view(e.description()).find("not representable in 64 bits") == std::string_view::npos)
    return std::nullopt;
  const auto lines = lines_of(text);
  const size_t line_no = e.source().begin.line;
  if (line_no < 1 || line_no > lines.size()) return std::nullopt;
  const std::string_view line = lines[line_no - 1];
  // The literal as written: the number that ends just before the reported column.
  size_t end = std::min<size_t>(e.source().begin.column > 0 ? e.source().begin.column - 1 : 0, line.size());
  while (end > 0 && !number_char(line[end - 1])) --end;
  size_t begin = end;
  while (begin > 0 && number_char(line[begin - 1])) --begin;
  const std::string value(line.substr(begin, end - begin));
  // The key: before the last '=' ahead of the value, after a '{' or ',' of an inline table.
  std::string key;
  const size_t eq = line.substr(0, begin).rfind('=');
  if (eq != std::string_view::npos) {
    const size_t from = line.substr(0, eq).find_last_of("{,");
    key = std::string(trim(line.substr(from == std::string_view::npos ? 0 : from + 1,
                                       eq - (from == std::string_view::npos ? 0 : from + 1))));
    // Inside an inline table ("train = { steps = ... }"): the table's key first.
    const size_t brace = line.substr(0, eq).rfind('{');
    if (brace != std::string_view::npos) {
      const size_t table_eq = line.substr(0, brace).rfind('=');
      if (table_eq != std::string_view::npos) {
        const size_t table_from = line.substr(0, table_eq).find_last_of("{,");
        const size_t start = table_from == std::string_view::npos ? 0 : table_from + 1;
        key = std::string(trim(line.substr(start, table_eq - start))) + "." + key;
      }
    }
    // Its table: the last [header] above the line.
    for (size_t i = line_no - 1; i-- > 0;) {
      std::string_view h = trim(lines[i]);
      if (h.empty() || h.front() != '[') continue;
      while (!h.empty() && h.front() == '[') h.remove_prefix(1);
      const size_t close = h.find(']');
      if (close != std::string_view::npos) h = trim(h.substr(0, close));
      if (!h.empty()) key = std::string(h) + "." + key;
      break;
    }
  }
  const IntRange range = range_of && !key.empty() ? range_of(key) : std::nullopt;
  const std::string where = fmt::format("{}:{}", source, line_no);
  const std::string what = key.empty() ? value : fmt::format("{} = {}", key, value);
  if (range)
    return fmt::format("{}: {} is out of range: it must be a whole number between {} and {}", where,
                       what, validate::bound_text(range->first), validate::upper_bound_text(range->second));
  return fmt::format("{}: {} is out of range: a TOML integer is between {} and {}", where, what,
                     std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max());
}

}  // namespace aiscale
