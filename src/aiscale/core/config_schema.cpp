#include "aiscale/core/config_schema.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "aiscale/core/toml_errors.h"
#include "aiscale/core/validate.h"

namespace aiscale::config {

const char* type_name(Kind k) {
  switch (k) {
    case Kind::integer: return "integer";
    case Kind::real: return "number";
    case Kind::string: return "string";
    case Kind::boolean: return "boolean";
  }
  return "?";
}

std::string node_text(const toml::node& n) {
  std::ostringstream os;
  n.visit([&](auto&& v) { os << v; });
  return os.str();
}

std::string toml_quote(const std::string& s) {
  std::ostringstream os;
  os << toml::value<std::string>(s);
  return os.str();
}

std::string fmt_number(double v) { return fmt::format("{}", v); }

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}


int64_t read_integer(const toml::node& n, const std::string& key, int64_t min, int64_t max) {
  auto v = n.value_exact<int64_t>();
  if (!v) fail("config key '{}' = {} must be an integer", key, node_text(n));
  return validate::in_range(*v, min, max, fmt::format("config key '{}'", key));
}

double read_real(const toml::node& n, const std::string& key, double min, double max) {
  auto v = n.value<double>();  // integers too
  if (!v || !n.is_number()) fail("config key '{}' = {} must be a number", key, node_text(n));
  return validate::in_range(*v, min, max, fmt::format("config key '{}'", key));
}

namespace {

void check_text(const std::string& key, const std::string& v) {
  for (size_t i = 0; i < v.size();) {
    const auto b = static_cast<unsigned char>(v[i]);
    const size_t len = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xE ? 3 : (b >> 3) == 0x1E ? 4 : 0;
    char32_t cp = len == 1 ? b : len == 2 ? (b & 0x1F) : len == 3 ? (b & 0x0F) : (b & 0x07);
    bool ok = len > 0 && i + len <= v.size();
    for (size_t j = 1; ok && j < len; ++j) {
      const auto c = static_cast<unsigned char>(v[i + j]);
      ok = (c >> 6) == 0x2;
      cp = (cp << 6) | (c & 0x3F);
    }
    static constexpr char32_t kMinOfLength[] = {0, 0, 0x80, 0x800, 0x10000};
    ok = ok && cp >= kMinOfLength[len] && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF);
    if (!ok)
      fail("config key '{}': the value is not valid UTF-8 text (byte {} of it): write it as "
           "UTF-8", key, i + 1);
    if (cp < 0x20 || cp == 0x7F)
      fail("config key '{}': the value holds the control character U+{:04X}: remove it", key,
           static_cast<uint32_t>(cp));
    i += len;
  }
}

const KeyView* find_view(const std::vector<KeyView>& keys, const std::string& name) {
  for (const auto& k : keys)
    if (k.name == name) return &k;
  return nullptr;
}

IntRange range_of(const std::vector<KeyView>& keys, const std::string& name) {
  const KeyView* k = find_view(keys, name);
  if (!k || k->kind != Kind::integer) return std::nullopt;
  return std::make_pair(k->min_int, k->max_int);
}

}  // namespace

std::string read_string(const toml::node& n, const std::string& key,
                        const std::vector<std::string>& choices) {
  auto v = n.value_exact<std::string>();
  if (!v) fail("config key '{}' = {} must be a string (in quotes)", key, node_text(n));
  check_text(key, *v);
  if (!choices.empty() && std::find(choices.begin(), choices.end(), *v) == choices.end())
    fail("config key '{}' = \"{}\" is not allowed: choose one of {}", key, *v,
         fmt::format("{}", fmt::join(choices, ", ")));
  return *v;
}

bool read_boolean(const toml::node& n, const std::string& key) {
  auto v = n.value_exact<bool>();
  if (!v) fail("config key '{}' = {} must be true or false", key, node_text(n));
  return *v;
}

toml::table parse_toml(const std::string& text, const std::string& source,
                       const std::vector<KeyView>& keys) {
  try {
    return toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    auto range = [&](const std::string& key) { return range_of(keys, key); };
    if (auto m = toml_integer_out_of_range(e, text, source, range)) fail("{}", *m);
    const auto& where = e.source().begin;
    fail("{}:{}:{}: malformed TOML: {}", source, where.line, where.column, e.description());
  }
}

toml::table override_table(const std::string& o, const std::vector<KeyView>& keys) {
  const auto eq = o.find('=');
  if (eq == std::string::npos || eq == 0)
    fail("--set '{}' is malformed: write --set section.key=value (e.g. --set train.steps=50)", o);
  const std::string key = o.substr(0, eq), value = o.substr(eq + 1);
  const auto dot = key.find('.');
  if (dot == std::string::npos) fail("--set '{}': the key must name its section, e.g. train.{}", o, key);
  // Values are TOML literals; a bare word is taken as a string.
  toml::table t;
  const KeyView* known = find_view(keys, key);
  const bool quoted = !value.empty() && (value.front() == '"' || value.front() == '\'');
  if (known && known->kind == Kind::string && !quoted) {
    t = toml::table{{"v", value}};  // a bare word for a string key is the string itself
  } else {
    try {
      t = toml::parse("v = " + value);
    } catch (const toml::parse_error&) {
      // Digits beyond 64 bits are a number out of range, not a word.
      if (validate::looks_integer(value)) {
        const IntRange range = range_of(keys, key);
        fail("{}: {}", override_origin(o),
             validate::out_of_range_text(fmt::format("config key '{}'", key), value,
                                         range ? range->first : std::numeric_limits<int64_t>::min(),
                                         range ? range->second : std::numeric_limits<int64_t>::max()));
      }
      t = toml::table{{"v", value}};
    }
  }
  toml::table section{{key.substr(dot + 1), *t.get("v")}};
  return toml::table{{key.substr(0, dot), section}};
}

void unknown_key(const std::string& key, const std::string& value, const std::string& origin,
                 const std::vector<KeyView>& keys, const std::string& what) {
  std::string best;
  size_t best_d = 1000;
  const std::string section = key.substr(0, key.find('.'));
  std::vector<std::string> sections, in_section;
  for (const auto& k : keys) {
    const size_t d = edit_distance(key, k.name);
    if (d < best_d) best_d = d, best = k.name;
    const std::string s = k.name.substr(0, k.name.find('.'));
    if (std::find(sections.begin(), sections.end(), s) == sections.end()) sections.push_back(s);
    if (s == section) in_section.push_back(k.name);
  }
  const std::string hint = best_d <= 3 ? fmt::format(" — did you mean '{}'?", best) : "";
  std::string allowed;
  if (in_section.empty()) {
    for (const auto& s : sections) allowed += fmt::format("{}[{}]", allowed.empty() ? "" : ", ", s);
    allowed = "sections are " + allowed;
  } else {
    allowed = fmt::format("keys of [{}] are {}", section, fmt::join(in_section, ", "));
  }
  fail("{}: unknown {} '{}' (value {}){}; {}", origin, what, key, value, hint, allowed);
}

std::string key_lines(const std::vector<KeyInfo>& keys) {
  std::string out;
  for (const auto& k : keys) {
    const std::string extra = k.choices.empty() ? "" : fmt::format(" [{}]", fmt::join(k.choices, "|"));
    out += fmt::format("  {:<28} {:<8} {}{}\n", k.name, k.type, k.doc, extra);
  }
  return out;
}

namespace {

// Markdown table cells: a '|' would end the cell.
std::string cell(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '|') out += '\\';
    out += c;
  }
  return out;
}

std::string allowed_values(const KeyInfo& k) {
  if (k.type == "integer") {
    if (k.max_int == std::numeric_limits<int64_t>::max()) return fmt::format(">= {}", k.min_int);
    return fmt::format("{} to {}", k.min_int, k.max_int);
  }
  if (k.type == "number") {
    if (k.max_real >= std::numeric_limits<double>::max()) return fmt::format(">= {}", k.min_real);
    return fmt::format("{} to {}", k.min_real, k.max_real);
  }
  if (k.type == "boolean") return "`true`, `false`";
  if (k.choices.empty()) return "text";
  std::string out;
  for (const auto& c : k.choices) out += fmt::format("{}`{}`", out.empty() ? "" : ", ", c);
  return out;
}

}  // namespace

std::string key_tables(const std::vector<KeyInfo>& keys, const std::string& heading_level) {
  std::string out, section;
  for (const KeyInfo& k : keys) {
    const std::string s = k.name.substr(0, k.name.find('.'));
    if (s != section) {
      section = s;
      out += fmt::format("\n{} [{}]\n\n", heading_level, s);
      out += "| Key | Type | Default | Allowed | Meaning |\n";
      out += "|---|---|---|---|---|\n";
    }
    out += fmt::format("| `{}` | {} | `{}` | {} | {} |\n", k.name, k.type, cell(k.default_value),
                       cell(allowed_values(k)), cell(k.doc));
  }
  return out;
}

}  // namespace aiscale::config
