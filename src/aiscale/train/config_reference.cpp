// docs/reference/config.md: every key of the training config's schema (config.cpp) as a
// Markdown page, so the reference is made from the code that checks the keys and cannot
// drift from it (tests/train/config_reference_test.cpp compares the checked-in page).
#include <cstdint>
#include <limits>
#include <string>

#include <fmt/format.h>

#include "aiscale/train/config.h"

namespace aiscale::train {

namespace {

// Markdown table cells: a '|' would end the cell.
std::string cell(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '|') out += '\\';
    out += c;
  }
  return out;
}

std::string allowed_values(const ConfigKeyInfo& k) {
  if (k.type == "integer") {
    if (k.max_int == std::numeric_limits<int64_t>::max()) return fmt::format(">= {}", k.min_int);
    return fmt::format("{} to {}", k.min_int, k.max_int);
  }
  if (k.type == "number") {
    if (k.max_real >= std::numeric_limits<double>::max()) return fmt::format(">= {}", k.min_real);
    return fmt::format("{} to {}", k.min_real, k.max_real);
  }
  if (k.type == "boolean") return "`true`, `false`";
  if (k.choices.empty()) return "text";
  std::string out;
  for (const auto& c : k.choices) out += fmt::format("{}`{}`", out.empty() ? "" : ", ", c);
  return out;
}

}  // namespace

std::string config_reference_markdown() {
  std::string out =
      "# Training configuration reference\n"
      "\n"
      "<!-- Generated from the schema in src/aiscale/train/config.cpp; do not edit. Regenerate:\n"
      "     build/cpu/aiscale train --config-reference > docs/reference/config.md -->\n"
      "\n"
      "Every key of the TOML file that `aiscale train --config FILE` (and `bench language`,\n"
      "`plan`) reads, section by section. A key left out takes its default; `--set\n"
      "section.key=value` overrides one on the command line. Integers and numbers outside\n"
      "their range, strings outside their choices and unknown keys are refused with the key\n"
      "named. How the keys work together: [training.md](../guide/training.md). The keys of\n"
      "an image classifier (`[model] kind = \"resnet\"`) are in `aiscale train --help`.\n";
  std::string section;
  for (const ConfigKeyInfo& k : config_keys()) {
    const std::string s = k.name.substr(0, k.name.find('.'));
    if (s != section) {
      section = s;
      out += fmt::format("\n## [{}]\n\n", s);
      out += "| Key | Type | Default | Allowed | Meaning |\n";
      out += "|---|---|---|---|---|\n";
    }
    out += fmt::format("| `{}` | {} | `{}` | {} | {} |\n", k.name, k.type, cell(k.default_value),
                       cell(allowed_values(k)), cell(k.doc));
  }
  return out;
}

}  // namespace aiscale::train
