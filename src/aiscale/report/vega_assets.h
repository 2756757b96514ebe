// The JavaScript that draws the charts: vega, vega-lite and vega-embed from their npm
// packages (installed by scripts/setup.sh), read at run time and inlined into the page.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

namespace aiscale::report {

struct JsLibrary {
  std::string package;  // npm package name
  std::string version;  // from its package.json
  std::string file;     // the file read
  std::string code;     // its contents, safe to place inside <script>…</script>
};

// The node_modules folder holding vega/, vega-lite/ and vega-embed/: $AISCALE_VEGA_DIR if
// set, else <source dir>/third_party_npm/node_modules (where scripts/setup.sh installs them).
std::filesystem::path default_vega_dir();

// Reads the three UMD builds (in load order); fails naming the missing file and the fix.
std::vector<JsLibrary> load_vega_libraries(const std::filesystem::path& node_modules = default_vega_dir());

// JavaScript made safe for an inline <script>: "</script" and "<!--" cannot end or change
// the script element (both are rewritten with escapes valid in strings, regexes and code).
std::string inline_script_safe(std::string code);

}  // namespace aiscale::report
