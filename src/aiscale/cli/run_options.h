// The options that describe a training run, defined once and shared by `aiscale train`,
// `aiscale bench language` and `aiscale plan`: each is named after its config key
// (model.n_layer -> --n-layer, train.batch_size -> --batch-size, parallel.zero_stage ->
// --zero-stage) and means the same everywhere. Older spellings stay as aliases (listed in
// kRunOptions) because scripts and recorded commands use them.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

namespace aiscale::cli {

// The values given, by config key, as text, in the order of the definitions (model.preset
// first, so that a preset never undoes a size given beside it). Each option once.
struct RunOptions {
  std::vector<std::pair<std::string, std::string>> values;

  // "key=value" for each value: the train config's --set form, applied through its schema
  // (train/config.h), which is the one mapping from these options to the config.
  std::vector<std::string> overrides() const;
  // The value given for `key`, if any.
  std::optional<std::string> text(std::string_view key) const;
  std::optional<int64_t> integer(std::string_view key) const;
};

// Adds the options of `keys` (config keys, e.g. "model.n_layer"; see kRunOptions in
// run_options.cpp) to `app`, filling `o`, in the help group `group`.
void add_run_options(CLI::App* app, RunOptions& o, const std::vector<std::string>& keys,
                     const std::string& group);

// The option names of a config key ("--n-layer,--layers"): for messages and help.
std::string run_option_names(std::string_view key);

// Every key that has an option, in the order of the help.
std::vector<std::string> run_option_keys();

// `message` (an error about config keys) with the options of the keys it names added, for
// a command whose user gave options rather than keys: "... [train.attention is
// --attention]".
std::string with_option_names(const std::string& message);

}  // namespace aiscale::cli
