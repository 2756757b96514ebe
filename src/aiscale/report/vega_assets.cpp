// Locating and reading the Vega JavaScript libraries.
#include "aiscale/report/vega_assets.h"

#include <cctype>
#include <cstdlib>

#include <nlohmann/json.hpp>

#include "aiscale/core/error.h"
#include "aiscale/core/fs.h"
#include "aiscale/core/paths.h"

namespace aiscale::report {

namespace fs = std::filesystem;

fs::path default_vega_dir() { return resolve_data_path(kChartLibraries).path; }

std::vector<JsLibrary> load_vega_libraries(const fs::path& node_modules) {
  const std::pair<const char*, const char*> builds[] = {
      {"vega", "build/vega.min.js"},
      {"vega-lite", "build/vega-lite.min.js"},
      {"vega-embed", "build/vega-embed.min.js"}};
  std::vector<JsLibrary> out;
  for (auto [package, file] : builds) {
    const fs::path dir = node_modules / package;
    const fs::path path = dir / file;
    if (!fs::exists(path))
      fail("the chart library '{}' is not installed: '{}' is missing. Run scripts/setup.sh (it "
           "installs vega, vega-lite and vega-embed from npm into third_party_npm/), or set "
           "AISCALE_VEGA_DIR to a node_modules folder that holds them",
           package, path.string());
    JsLibrary lib;
    lib.package = package;
    lib.file = path.string();
    lib.code = inline_script_safe(read_file(lib.file));
    try {
      lib.version = nlohmann::json::parse(read_file((dir / "package.json").string())).value("version", "");
    } catch (const nlohmann::json::exception&) {
      fail("'{}' is damaged (not JSON): reinstall with scripts/setup.sh", (dir / "package.json").string());
    }
    out.push_back(std::move(lib));
  }
  return out;
}

std::string inline_script_safe(std::string code) {
  // "<\/script" is "</script" in a string, a regex and a template; "<\x21--" is "<!--" in a
  // string and a regex. Case matters to HTML's tokenizer only for the tag name.
  std::string out;
  out.reserve(code.size());
  for (size_t i = 0; i < code.size(); ++i) {
    if (code[i] == '<' && i + 1 < code.size() && code[i + 1] == '/' && code.size() - i >= 8) {
      std::string tag = code.substr(i + 2, 6);
      for (char& c : tag) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      if (tag == "script") {
        out += "<\\/";
        ++i;
        continue;
      }
    }
    if (code.compare(i, 4, "<!--") == 0) {
      out += "<\\x21";
      ++i;
      continue;
    }
    out += code[i];
  }
  return out;
}

}  // namespace aiscale::report
