// Where the values of a run config came from, for its error messages: each key's origin
// ("run.toml:7", "--set train.steps=50", or "--steps 50" for an override made from a
// command-line option), so that a message about a value names where the user gave it
// rather than the config file, which may not hold it at all. Used by the config engine
// (config_schema.h).
#pragma once
#include <map>
#include <string>

#include <toml++/toml.h>

namespace aiscale::config {

using Origins = std::map<std::string, std::string>;  // key -> origin; defaults have none

// Records that the override `key=value` was made from a command-line option (`--steps 50`),
// so that errors about it name the option the user gave rather than a --set they did not
// write. The overrides pass through the training session as text; this is how their
// origin travels with them.
void name_override_origin(const std::string& override_text, const std::string& origin);

// The origin of the override `key=value`: the option it was made from
// (name_override_origin), else "--set key=value".
std::string override_origin(const std::string& override_text);

// "{source}:{line}" for a node read from the file `source`; `source` itself for an override.
std::string node_origin(const toml::node& n, const std::string& source, bool from_file);

// A check's message "SOURCE: ... train.seq_len ... model.block_size ..." with SOURCE replaced
// by the origins of the keys it names, in the order it names them ("--seq-len 4096,
// run.toml:2 (model.preset): ..."); unchanged when it names no key with an origin.
std::string with_origins(const std::string& message, const std::string& source, const Origins& origins);

}  // namespace aiscale::config
