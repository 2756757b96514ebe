// docs/reference/config.md: every key of the training config's schema (config.cpp) as a
// Markdown page, so the reference is made from the code that checks the keys and cannot
// drift from it (tests/train/config_reference_test.cpp compares the checked-in page).
#include <cstdint>
#include <limits>
#include <string>

#include <fmt/format.h>

#include "aiscale/core/config_schema.h"
#include "aiscale/train/config.h"
#include "aiscale/train/vision_config.h"

namespace aiscale::train {

std::string config_reference_markdown() {
  std::string out =
      "# Training configuration reference\n"
      "\n"
      "<!-- Generated from the schemas in src/aiscale/train/config.cpp and vision_config.cpp; do not\n"
      "     edit. Regenerate:\n"
      "     build/cpu/aiscale train --config-reference > docs/reference/config.md -->\n"
      "\n"
      "Every key of the TOML file that `aiscale train --config FILE` (and `bench language`,\n"
      "`plan`) reads, section by section. A key left out takes its default; `--set\n"
      "section.key=value` overrides one on the command line. Integers and numbers outside\n"
      "their range, strings outside their choices and unknown keys are refused with the key\n"
      "named. How the keys work together: [training.md](../guide/training.md). The keys of\n"
      "an image classifier (`[model] kind = \"resnet\"`) follow those of the language models.\n";
  out += config::key_tables(config_keys(), "##");
  out +=
      "\n## Image classifiers\n"
      "\n"
      "A config with `[model] kind = \"resnet\"` (or a ResNet preset) trains an image\n"
      "classifier ([vision.md](../guide/vision.md)); its keys, some of them shared with the\n"
      "language models above:\n";
  out += config::key_tables(vision_config_keys(), "###");
  return out;
}

}  // namespace aiscale::train
