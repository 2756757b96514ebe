// The names of an enum's values, from one table per enum: a row {value, name} per name, the
// first row of a value giving the name it is written as and later rows of that value the other
// spellings accepted when reading it ("fp32", then "float32").
#pragma once
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "aiscale/core/error.h"

namespace aiscale {

template <typename E>
struct EnumName {
  E value;
  const char* name;
};

// The name `value` is written as; `unknown` where the table has no row for it (a value read
// from a file).
template <typename E, size_t N>
const char* enum_name(const EnumName<E> (&table)[N], E value, const char* unknown = "?") {
  for (const EnumName<E>& row : table)
    if (row.value == value) return row.name;
  return unknown;
}

// The value named `name` (any of its spellings), nothing for an unknown name.
template <typename E, size_t N>
std::optional<E> find_enum(const EnumName<E> (&table)[N], std::string_view name) {
  for (const EnumName<E>& row : table)
    if (name == row.name) return row.value;
  return std::nullopt;
}

// The names the values are written as, in the table's order, for a message: "a, b or c".
template <typename E, size_t N>
std::string enum_choices(const EnumName<E> (&table)[N]) {
  std::vector<const char*> names;
  for (size_t i = 0; i < N; ++i) {
    bool first = true;  // later rows of a value are its other spellings
    for (size_t j = 0; j < i && first; ++j) first = table[j].value != table[i].value;
    if (first) names.push_back(table[i].name);
  }
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += i + 1 == names.size() ? " or " : ", ";
    out += names[i];
  }
  return out;
}

// The value named `name`; an unknown name fails as "unknown <what> '<name>': use a, b or c".
template <typename E, size_t N>
E parse_enum(const EnumName<E> (&table)[N], std::string_view name, std::string_view what) {
  if (const std::optional<E> value = find_enum(table, name)) return *value;
  fail("unknown {} '{}': use {}", what, name, enum_choices(table));
}

}  // namespace aiscale
