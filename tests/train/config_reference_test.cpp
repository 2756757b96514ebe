// docs/reference/config.md is generated from the training config's schema: the checked-in
// page must be what `aiscale train --config-reference` prints, so a key added, removed or
// changed in train/config.cpp fails here until the page is regenerated.
#include <filesystem>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "aiscale/train/config.h"
#include "aiscale/train/vision_config.h"
#include "../support/run_support.h"

namespace aiscale {
namespace {

namespace fs = std::filesystem;
using namespace testsupport;

const char* kRegenerate =
    "docs/reference/config.md is not what the code generates: regenerate it with\n"
    "    build/cpu/aiscale train --config-reference > docs/reference/config.md\n"
    "(from the repository root, after building) and commit it.";

fs::path page() { return fs::path(AISCALE_TEST_DATA_DIR).parent_path() / "docs/reference/config.md"; }

// The first line where two texts part, for a message that shows the difference.
std::string first_difference(const std::string& want, const std::string& have) {
  std::istringstream a(want), b(have);
  std::string la, lb;
  for (int line = 1;; ++line) {
    const bool more_a = static_cast<bool>(std::getline(a, la));
    const bool more_b = static_cast<bool>(std::getline(b, lb));
    if (!more_a && !more_b) return "the texts differ only in their last newline";
    if (la != lb || more_a != more_b)
      return "line " + std::to_string(line) + ":\n  generated: " + (more_a ? la : "(end)") +
             "\n  the page:  " + (more_b ? lb : "(end)");
  }
}

TEST(ConfigReference, TheCheckedInPageIsWhatTheCodeGenerates) {
  ASSERT_TRUE(fs::exists(page())) << kRegenerate;
  const std::string generated = train::config_reference_markdown();
  const std::string checked_in = read_bytes(page());
  EXPECT_TRUE(generated == checked_in) << kRegenerate << "\n" << first_difference(generated, checked_in);
}

TEST(ConfigReference, TheCommandPrintsThePage) {
  const RunOutput r = run_aiscale("train --config-reference");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(r.output == train::config_reference_markdown()) << first_difference(train::config_reference_markdown(), r.output);
}

// Each schema's keys in its own part of the page: the language models', then the image
// classifiers' (which share some keys, defined once in train/config_common_keys.h).
void expect_one_row_each(const std::string& md, const std::vector<config::KeyInfo>& keys) {
  for (const config::KeyInfo& k : keys) {
    SCOPED_TRACE(k.name);
    const std::string row = "| `" + k.name + "` | " + k.type + " | `";
    const size_t at = md.find(row);
    ASSERT_NE(at, std::string::npos);
    EXPECT_EQ(md.find(row, at + 1), std::string::npos) << "two rows";
    const std::string line = md.substr(at, md.find('\n', at) - at);
    EXPECT_NE(line.find(k.default_value), std::string::npos) << line;
    if (k.type == "integer") EXPECT_NE(line.find(std::to_string(k.min_int)), std::string::npos) << line;
    for (const auto& c : k.choices) EXPECT_NE(line.find("`" + c + "`"), std::string::npos) << line;
  }
}

TEST(ConfigReference, EveryKeyHasOneRowWithItsDefaultAndRange) {
  const std::string md = train::config_reference_markdown();
  const size_t vision = md.find("\n## Image classifiers\n");
  ASSERT_NE(vision, std::string::npos);
  expect_one_row_each(md.substr(0, vision), train::config_keys());
  expect_one_row_each(md.substr(vision), train::vision_config_keys());
  // One known key of each kind, with the value the schema gives it.
  EXPECT_NE(md.find("| `train.steps` | integer |"), std::string::npos);
  EXPECT_NE(md.find("| `model.preset` | string | `'gpt-mini'` |"), std::string::npos);
}

}  // namespace
}  // namespace aiscale
