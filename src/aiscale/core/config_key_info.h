// What a config schema (config_schema.h) says about one of its keys, without the engine:
// for the command-line options named after the keys (cli/run_options.h), help texts and
// docs/reference/config.md.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace aiscale::config {

// type: "integer", "number", "string" or "boolean"; `default_value` is a TOML literal, from
// a default-constructed config.
struct KeyInfo {
  std::string name, type, doc;
  std::vector<std::string> choices;
  int64_t min_int = 0, max_int = 0;
  double min_real = 0, max_real = 0;
  std::string default_value;
};

}  // namespace aiscale::config
