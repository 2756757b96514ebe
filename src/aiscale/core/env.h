// Every AISCALE_* environment variable that the product reads, in one table
// (core/env.cpp): its name, allowed values, default, what kind of knob it is and what it
// is for. Code reads them only through these accessors, never through getenv, so that the
// table stays the whole list; reading a name that is not in the table is a programming
// error (Error naming the variable).
//
// Kinds:
// - user: a documented option of the product (e.g. where to find the GPT-2 vocabulary);
// - measurement: keeps an alternative code path reachable for a measurement or a test
//   that compares it with the default (docs/design/ says which). A switch whose
//   measurement has concluded leaves the product together with the path it selected;
// - diagnostic: prints or times, changes no result;
// - test: fault injection for the tests of failure handling.
//
// Kept free of C++20 library features: CUDA sources (C++17) include it.
#pragma once
#include <cstddef>
#include <string>

namespace aiscale::env {

enum class Kind { user, measurement, diagnostic, test };

struct Variable {
  const char* name;
  const char* values;    // allowed values, as a reader would write them
  const char* fallback;  // the value when unset or empty ("" where there is none)
  Kind kind;
  const char* purpose;   // what it is for; where it is read
};

// The table, in its order.
const Variable* variables(size_t* count);
// The entry of `name`; Error if the table has none (add the variable to env.cpp first).
const Variable& variable(const char* name);

// The value of a registered variable, or its fallback when unset or empty.
std::string get(const char* name);
// A registered variable whose values are a list of words ("auto | exhaustive | legacy"):
// its value or fallback, or Error naming the variable, the value and the accepted words.
std::string choice(const char* name);
// Whether a registered variable is set to a non-empty value.
bool is_set(const char* name);
// A registered on/off variable: "0", "false" and "off" are off, any other value on; the
// fallback ("0" or "1") when unset or empty.
bool flag(const char* name);

const char* kind_name(Kind k);

}  // namespace aiscale::env
