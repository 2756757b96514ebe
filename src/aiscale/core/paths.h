// Where aiscale finds the data it reads at run time: the systems catalogue, the example
// configs and the GPT-2 vocabulary. In this order:
//   1. the environment variable naming that item (AISCALE_SYSTEMS_DIR,
//      AISCALE_GPT2_VOCAB_DIR, AISCALE_CONFIGS_DIR): an explicit choice wins;
//   2. next to the executable, as `cmake --install` lays it out:
//      <prefix>/bin/aiscale reads <prefix>/share/aiscale/<item>;
//   3. the source tree the binary was built from (a build that was not installed).
// The first that is set (1) or exists and is not empty (2) is used; otherwise the source tree's path,
// whose absence the reader reports with its own message.
#pragma once
#include <filesystem>
#include <functional>
#include <string>

namespace aiscale {

struct DataItem {
  const char* env_var;         // "AISCALE_SYSTEMS_DIR"
  const char* installed_path;  // under <prefix>/share/aiscale: "data/systems"
  const char* source_path;     // under the source tree: "data/systems"
};

// The catalogue, the configs and the GPT-2 vocabulary.
extern const DataItem kSystemsCatalog;
extern const DataItem kExampleConfigs;
extern const DataItem kGpt2Vocabulary;
extern const DataItem kChartLibraries;  // vega, vega-lite, vega-embed (the HTML report)

struct ResolvedPath {
  std::filesystem::path path;
  std::string origin;  // "$AISCALE_SYSTEMS_DIR", "installed", "source tree"
};

// Pure form, for tests: `getenv` for the variables, `executable` the binary's path,
// `source_dir` the source tree.
ResolvedPath resolve_data_path(const DataItem& item,
                               const std::function<const char*(const char*)>& getenv,
                               const std::filesystem::path& executable,
                               const std::filesystem::path& source_dir);
// For this process (its environment, /proc/self/exe, AISCALE_SOURCE_DIR).
ResolvedPath resolve_data_path(const DataItem& item);

// The running executable's path ("" when the system does not say).
std::filesystem::path executable_path();

// One line per item, "systems catalogue: /usr/local/share/aiscale/data/systems (installed)",
// for `aiscale --version`.
std::string data_paths_summary();

}  // namespace aiscale
