// One engine for the TOML configs of the binary (the training config of GPT and Llama runs,
// the image classifier's config): a schema is a list of keys, each with its type, meaning,
// range or choices, and how it reads and writes its member; the engine reads a file and
// `--set section.key=value` overrides into a config, names where every bad value came from
// (config_origins.h), suggests the key meant when one is misspelt, writes the resolved
// config back as TOML, and describes every key for help texts and the reference page.
// A config type defines its keys once (train/config.cpp, train/vision_config.cpp); keys
// common to several configs are defined once by a function templated on the config type.
#pragma once
#include <cstdint>
#include <algorithm>
#include <functional>
#include <limits>
#include <optional>
#include <type_traits>
#include <string>
#include <utility>
#include <vector>

#include <toml++/toml.h>

#include "aiscale/core/config_key_info.h"
#include "aiscale/core/config_origins.h"
#include "aiscale/core/error.h"

namespace aiscale::config {

enum class Kind { integer, real, string, boolean };

// "integer", "number", "string", "boolean".
const char* type_name(Kind k);

// The value of a node as TOML writes it, for messages.
std::string node_text(const toml::node& n);
// A string as a TOML literal (quoted and escaped).
std::string toml_quote(const std::string& s);

// Readers of one key's value; each throws Error naming the key and what is wanted.
// Integers are bounded on both sides: a count that reaches OpenMP, an allocator or a loop
// bound must be refused here, with the key named, rather than crash there.
int64_t read_integer(const toml::node& n, const std::string& key, int64_t min, int64_t max);
// Reals must be finite (TOML allows nan and inf, and NaN passes every `<` test) and in
// [min, max]; integers are taken as numbers.
double read_real(const toml::node& n, const std::string& key, double min, double max);
// Strings name files, globs and runs: UTF-8 text (TOML's own rule, which a --set bare word
// would otherwise bypass) without control characters (a NUL would cut a path short);
// one of `choices` where it is not empty.
std::string read_string(const toml::node& n, const std::string& key,
                        const std::vector<std::string>& choices);
bool read_boolean(const toml::node& n, const std::string& key);

// The schema-independent half of the engine, over a view of the keys.
struct KeyView {
  std::string name;
  Kind kind;
  int64_t min_int, max_int;
};
// The TOML table of the file `source` (its errors with line and column; an integer beyond
// 64 bits named with its key's range).
toml::table parse_toml(const std::string& text, const std::string& source,
                       const std::vector<KeyView>& keys);
// The override "section.key=value" as a one-key table; `string_key`: the key takes strings,
// so a bare word is that string. Throws Error for a malformed override.
toml::table override_table(const std::string& override_text, const std::vector<KeyView>& keys);
// Throws Error for the unknown key `key` (value `value`, from `origin`), suggesting the
// nearest known key and listing its section's keys. `what`: "config key", "vision config key".
[[noreturn]] void unknown_key(const std::string& key, const std::string& value,
                              const std::string& origin, const std::vector<KeyView>& keys,
                              const std::string& what);
// Levenshtein distance, for suggesting the key meant by a misspelt one.
size_t edit_distance(const std::string& a, const std::string& b);
// A number as the config writes it back ("3e-4", "0.9", "25").
std::string fmt_number(double v);

template <class C>
struct Key {
  std::string name;  // "section.key"
  Kind kind = Kind::string;
  std::string doc;
  std::vector<std::string> choices;  // strings with a fixed set
  int64_t min_int = 0, max_int = 0;  // integers
  double min_real = 0, max_real = 0;  // numbers
  std::function<void(C&, const toml::node&)> set;
  std::function<std::string(const C&)> get;  // TOML literal
};

// Keys bound to a field. `field` is a member pointer of C, or a callable returning a
// reference to the field inside a C (for nested structs: [](C& c) -> T& { return c.m.x; }).
template <class C, class F>
decltype(auto) field_of(F field, C& c) {
  if constexpr (std::is_member_object_pointer_v<F>) {
    return (c.*field);
  } else {
    return field(c);
  }
}
// The field's value in a const config (a callable accessor takes a mutable one: a copy).
template <class C, class F>
auto value_of(F field, const C& c) {
  if constexpr (std::is_member_object_pointer_v<F>) {
    return c.*field;
  } else {
    C copy = c;
    return field(copy);
  }
}

template <class C, class F>
Key<C> integer_key(std::string name, F field, std::string doc, int64_t min, int64_t max) {
  Key<C> k{std::move(name), Kind::integer, std::move(doc), {}, min, max};
  k.set = [field, min, max, key = k.name](C& c, const toml::node& n) {
    auto& f = field_of(field, c);
    f = static_cast<std::remove_reference_t<decltype(f)>>(read_integer(n, key, min, max));
  };
  k.get = [field](const C& c) { return std::to_string(static_cast<int64_t>(value_of(field, c))); };
  return k;
}

template <class C, class F>
Key<C> real_key(std::string name, F field, std::string doc, double min = 0.0,
                double max = std::numeric_limits<double>::max()) {
  Key<C> k{std::move(name), Kind::real, std::move(doc), {}, 0, 0, min, max};
  k.set = [field, min, max, key = k.name](C& c, const toml::node& n) {
    auto& f = field_of(field, c);
    f = static_cast<std::remove_reference_t<decltype(f)>>(read_real(n, key, min, max));
  };
  k.get = [field](const C& c) { return fmt_number(static_cast<double>(value_of(field, c))); };
  return k;
}

template <class C, class F>
Key<C> string_key(std::string name, F field, std::string doc, std::vector<std::string> choices = {}) {
  Key<C> k{std::move(name), Kind::string, std::move(doc), std::move(choices)};
  k.set = [field, key = k.name, allowed = k.choices](C& c, const toml::node& n) {
    field_of(field, c) = read_string(n, key, allowed);
  };
  k.get = [field](const C& c) { return toml_quote(value_of(field, c)); };
  return k;
}

template <class C, class F>
Key<C> boolean_key(std::string name, F field, std::string doc) {
  Key<C> k{std::move(name), Kind::boolean, std::move(doc)};
  k.set = [field, key = k.name](C& c, const toml::node& n) { field_of(field, c) = read_boolean(n, key); };
  k.get = [field](const C& c) { return std::string(value_of(field, c) ? "true" : "false"); };
  return k;
}

// Shorthands for keys bound to a member of C (C deduced from the member pointer).
template <class C, class T>
Key<C> int_key(std::string name, T C::*member, std::string doc, int64_t min, int64_t max) {
  return integer_key<C>(std::move(name), member, std::move(doc), min, max);
}
template <class C>
Key<C> real_key(std::string name, double C::*member, std::string doc, double min = 0.0,
                double max = std::numeric_limits<double>::max()) {
  return real_key<C, double C::*>(std::move(name), member, std::move(doc), min, max);
}
template <class C>
Key<C> string_key(std::string name, std::string C::*member, std::string doc,
                  std::vector<std::string> choices = {}) {
  return string_key<C, std::string C::*>(std::move(name), member, std::move(doc), std::move(choices));
}
template <class C>
Key<C> bool_key(std::string name, bool C::*member, std::string doc) {
  return boolean_key<C>(std::move(name), member, std::move(doc));
}

template <class C>
class Schema {
 public:
  // `what` names a key in messages ("config key"); `title` heads the TOML written back.
  Schema(std::vector<Key<C>> keys, std::string what, std::string title)
      : keys_(std::move(keys)), what_(std::move(what)), title_(std::move(title)) {
    for (const auto& k : keys_) views_.push_back({k.name, k.kind, k.min_int, k.max_int});
  }

  const std::vector<Key<C>>& keys() const { return keys_; }
  const Key<C>* find(const std::string& name) const {
    for (const auto& k : keys_)
      if (k.name == name) return &k;
    return nullptr;
  }

  // Reads every key of `root` into `c`, recording origins. `from_file`: the nodes carry
  // their line in `source`; otherwise `source` is the override. `first`: keys applied
  // before the others whatever their place in the file (a preset, which the other keys of
  // its section override); `on_first` is called after each with its origin.
  void apply(C& c, const toml::table& root, const std::string& source, bool from_file,
             Origins& origins, const std::vector<std::string>& first = {},
             const std::function<void(const std::string&, const std::string&)>& on_first = {}) const {
    auto origin_of = [&](const toml::node& n) { return node_origin(n, source, from_file); };
    for (const std::string& name : first) {
      const auto dot = name.find('.');
      const toml::node* n = root[name.substr(0, dot)][name.substr(dot + 1)].node();
      if (!n) continue;
      set_one(c, name, *n, origin_of(*n), origins);
      if (on_first) on_first(name, origin_of(*n));
    }
    for (const auto& [section_key, section_node] : root) {
      const std::string section(section_key.str());
      const toml::table* table = section_node.as_table();
      if (!table) unknown_key(section, node_text(section_node), origin_of(section_node), views_, what_);
      for (const auto& [key, node] : *table) {
        const std::string name = section + "." + std::string(key.str());
        if (std::find(first.begin(), first.end(), name) != first.end()) continue;
        set_one(c, name, node, origin_of(node), origins);
      }
    }
  }

  // A config from TOML text and overrides: defaults, then the file, then each override in
  // order; `adjust` (may be empty) before `validate`, whose Error is restated with the
  // origins of the keys it names.
  C parse(const std::string& text, const std::string& source, const std::vector<std::string>& overrides,
          const std::vector<std::string>& first,
          const std::function<void(const std::string&, const std::string&, Origins&)>& on_first,
          const std::function<void(C&)>& adjust,
          const std::function<void(const C&, const std::string&)>& validate) const {
    C c;
    Origins origins;
    auto note_first = [&](const std::string& key, const std::string& origin) {
      if (on_first) on_first(key, origin, origins);
    };
    apply(c, parse_toml(text, source, views_), source, true, origins, first, note_first);
    for (const std::string& o : overrides)
      apply(c, override_table(o, views_), override_origin(o), false, origins, first, note_first);
    if (adjust) adjust(c);
    try {
      validate(c, source);
    } catch (const Error& e) {
      fail("{}", with_origins(e.what(), source, origins));
    }
    return c;
  }

  // Every key with its value, section by section, as TOML.
  std::string to_toml(const C& c) const {
    std::string out = "# " + title_ + " (every key, with defaults)\n";
    std::string section;
    for (const auto& k : keys_) {
      const std::string s = k.name.substr(0, k.name.find('.'));
      if (s != section) {
        out += (section.empty() ? "[" : "\n[") + s + "]\n";
        section = s;
      }
      out += k.name.substr(k.name.find('.') + 1) + " = " + k.get(c) + "\n";
    }
    return out;
  }

  KeyInfo info(const Key<C>& k) const {
    KeyInfo i{k.name, type_name(k.kind), k.doc, k.choices, k.min_int, k.max_int};
    i.min_real = k.min_real;
    i.max_real = k.max_real;
    i.default_value = k.get(C{});
    return i;
  }
  std::vector<KeyInfo> infos() const {
    std::vector<KeyInfo> out;
    for (const auto& k : keys_) out.push_back(info(k));
    return out;
  }
  std::optional<KeyInfo> info(const std::string& name) const {
    const Key<C>* k = find(name);
    if (!k) return std::nullopt;
    return info(*k);
  }

 private:
  void set_one(C& c, const std::string& name, const toml::node& n, const std::string& origin,
               Origins& origins) const {
    const Key<C>* k = find(name);
    if (!k) unknown_key(name, node_text(n), origin, views_, what_);
    try {
      k->set(c, n);
    } catch (const Error& e) {
      fail("{}: {}", origin, e.what());
    }
    origins[name] = origin;
  }

  std::vector<Key<C>> keys_;
  std::vector<KeyView> views_;
  std::string what_, title_;
};

// Help text: one line per key (name, type, meaning, choices).
std::string key_lines(const std::vector<KeyInfo>& keys);
// Markdown: a section per [section], a row per key (type, default, allowed, meaning).
std::string key_tables(const std::vector<KeyInfo>& keys, const std::string& heading_level);

}  // namespace aiscale::config
