// The layering of src/aiscale (src/aiscale/layers.toml, docs/design/layers.md): every
// `#include "aiscale/FOLDER/..."` of a .h, .cpp, .cu or .cuh under src/aiscale names its own
// folder or a folder on a lower level; every folder stands in the table once; no quoted
// include reaches a project file by a relative path (which would slip past the check); no
// file opens `namespace aiscale::FOLDER` (a forward declaration) of a folder it may not
// include. The checker runs on the real tree and, to show that it can fail, on small trees
// made here with one fault each.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <toml++/toml.h>

#include "aiscale/core/error.h"
#include "../support/error_of.h"

namespace fs = std::filesystem;

namespace aiscale {
namespace {

fs::path src_root() { return fs::path(AISCALE_TEST_DATA_DIR).parent_path() / "src" / "aiscale"; }

// Folder -> level, from a layers.toml: levels = [["core"], ["ops", "data"], ...].
struct Layering {
  std::map<std::string, int> level;
};

Layering load_layering(const fs::path& path) {
  toml::table t;
  try {
    t = toml::parse_file(path.string());
  } catch (const toml::parse_error& e) {
    fail("{}: {}: fix the TOML", path.string(), e.description());
  }
  const toml::array* levels = t["levels"].as_array();
  if (!levels || levels->empty())
    fail("{}: no `levels` (an array of arrays of folder names, lowest level first)", path.string());
  Layering l;
  for (size_t i = 0; i < levels->size(); ++i) {
    const toml::array* folders = (*levels)[i].as_array();
    if (!folders || folders->empty())
      fail("{}: levels[{}] is not a non-empty array of folder names", path.string(), i);
    for (const toml::node& f : *folders) {
      const auto name = f.value<std::string>();
      if (!name) fail("{}: levels[{}] holds something other than a folder name", path.string(), i);
      if (!l.level.emplace(*name, static_cast<int>(i)).second)
        fail("{}: folder {} stands on two levels: keep it on one", path.string(), *name);
    }
  }
  return l;
}

bool is_source(const fs::path& p) {
  const std::string e = p.extension().string();
  return e == ".h" || e == ".cpp" || e == ".cu" || e == ".cuh";
}

// Every breach of the layering under `root` (a src/aiscale), one line each naming the file,
// the line and the rule.
std::vector<std::string> check_tree(const fs::path& root, const Layering& layers) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(root))
    if (e.is_directory() && !layers.level.count(e.path().filename().string()))
      out.push_back(fmt::format("folder {} is in no level of layers.toml: place it there "
                                "(docs/design/layers.md)", e.path().filename().string()));
  for (const auto& [folder, lvl] : layers.level)
    if (!fs::is_directory(root / folder))
      out.push_back(fmt::format("layers.toml names {}, which is no folder of {}", folder,
                                root.string()));

  static const std::regex include(R"(^\s*#\s*include\s*"([^"]+)\")");
  static const std::regex opens(R"(^\s*namespace\s+aiscale::(\w+))");
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    if (!e.is_regular_file() || !is_source(e.path())) continue;
    const fs::path rel = fs::relative(e.path(), root);
    const std::string where = (fs::path("src/aiscale") / rel).string();
    if (rel.begin() == rel.end() || std::next(rel.begin()) == rel.end()) {
      out.push_back(fmt::format("{}: a source file outside every folder: move it into the "
                                "folder of its level", where));
      continue;
    }
    const std::string folder = rel.begin()->string();
    const auto own = layers.level.find(folder);
    if (own == layers.level.end()) continue;  // reported above, once
    // May `folder` use `other`? Its own folder, or one on a lower level.
    auto allowed = [&](const std::string& other, int line, const std::string& what) {
      if (other == folder) return;
      const auto it = layers.level.find(other);
      if (it == layers.level.end()) {
        out.push_back(fmt::format("{}:{}: {} names folder {}, which is in no level of "
                                  "layers.toml", where, line, what, other));
      } else if (it->second >= own->second) {
        out.push_back(fmt::format(
            "{}:{}: {} runs {}: {} (level {}) may use only lower levels, and {} is on level "
            "{}; move what is used to the folder where it belongs (docs/design/layers.md)",
            where, line, what, it->second == own->second ? "sideways" : "upward", folder,
            own->second, other, it->second));
      }
    };
    std::ifstream in(e.path());
    std::string text;
    for (int n = 1; std::getline(in, text); ++n) {
      std::smatch m;
      if (std::regex_search(text, m, include)) {
        const std::string path = m[1].str();
        if (path.rfind("aiscale/", 0) == 0) {
          const std::string rest = path.substr(8);
          allowed(rest.substr(0, rest.find('/')), n, fmt::format("#include \"{}\"", path));
        } else if (fs::exists(e.path().parent_path() / path)) {
          out.push_back(fmt::format("{}:{}: #include \"{}\" reaches a project file by a "
                                    "relative path: write it as \"aiscale/...\"", where, n, path));
        }
      } else if (std::regex_search(text, m, opens) && layers.level.count(m[1].str())) {
        allowed(m[1].str(), n, fmt::format("namespace aiscale::{}", m[1].str()));
      }
    }
  }
  return out;
}

std::string lines(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += x + "\n";
  return s;
}

TEST(IncludeLayers, EveryIncludeOfSrcRunsDownward) {
  const Layering layers = load_layering(src_root() / "layers.toml");
  const std::vector<std::string> problems = check_tree(src_root(), layers);
  EXPECT_TRUE(problems.empty()) << problems.size() << " breaches of src/aiscale/layers.toml:\n"
                                << lines(problems);
}

// A small tree with levels core < ops < nn, and a way to write files into it.
class IncludeLayersTree : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            fmt::format("aiscale-layers-{}-{}", ::getpid(),
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    for (const char* d : {"core", "ops", "nn"}) fs::create_directories(root_ / d);
    write("layers.toml", "levels = [[\"core\"], [\"ops\"], [\"nn\"]]\n");
    write("core/tensor.h", "#pragma once\n");
    write("ops/ops.h", "#pragma once\n#include \"aiscale/core/tensor.h\"\n");
    write("nn/model.h", "#pragma once\n#include \"aiscale/ops/ops.h\"\n#include <vector>\n");
  }
  void TearDown() override { fs::remove_all(root_); }
  void write(const std::string& rel, const std::string& text) {
    fs::create_directories((root_ / rel).parent_path());
    std::ofstream(root_ / rel) << text;
  }
  std::vector<std::string> check() { return check_tree(root_, load_layering(root_ / "layers.toml")); }
  fs::path root_;
};

TEST_F(IncludeLayersTree, DownwardIncludesPass) { EXPECT_EQ(lines(check()), ""); }

TEST_F(IncludeLayersTree, UpwardIncludeFails) {
  write("ops/cuda/kernel.cu", "#include \"aiscale/ops/ops.h\"\n\n#include \"aiscale/nn/model.h\"\n");
  const std::vector<std::string> p = check();
  ASSERT_EQ(p.size(), 1u) << lines(p);
  EXPECT_NE(p[0].find("src/aiscale/ops/cuda/kernel.cu:3: #include \"aiscale/nn/model.h\" runs "
                      "upward: ops (level 1)"),
            std::string::npos) << p[0];
}

TEST_F(IncludeLayersTree, SidewaysIncludeFails) {
  write("layers.toml", "levels = [[\"core\"], [\"ops\", \"nn\"]]\n");
  const std::vector<std::string> p = check();  // nn/model.h includes ops, now its peer
  ASSERT_EQ(p.size(), 1u) << lines(p);
  EXPECT_NE(p[0].find("runs sideways"), std::string::npos) << p[0];
}

TEST_F(IncludeLayersTree, RelativeIncludeOfAProjectFileFails) {
  write("core/fs.cpp", "#include \"tensor.h\"\n#include \"generated_elsewhere.h\"\n");
  const std::vector<std::string> p = check();
  ASSERT_EQ(p.size(), 1u) << lines(p);
  EXPECT_NE(p[0].find("core/fs.cpp:1: #include \"tensor.h\" reaches a project file"),
            std::string::npos) << p[0];
}

TEST_F(IncludeLayersTree, UpwardForwardDeclarationFails) {
  write("core/view.h", "#pragma once\nnamespace aiscale::nn {\nclass Model;\n}\n");
  const std::vector<std::string> p = check();
  ASSERT_EQ(p.size(), 1u) << lines(p);
  EXPECT_NE(p[0].find("core/view.h:2: namespace aiscale::nn runs upward"), std::string::npos) << p[0];
}

TEST_F(IncludeLayersTree, FolderMissingFromTheTableFails) {
  write("extra/thing.cpp", "#include \"aiscale/core/tensor.h\"\n");
  write("ops/use.cpp", "#include \"aiscale/extra/thing.h\"\n");
  const std::string p = lines(check());
  EXPECT_NE(p.find("folder extra is in no level of layers.toml"), std::string::npos) << p;
  EXPECT_NE(p.find("ops/use.cpp:1: #include \"aiscale/extra/thing.h\" names folder extra"),
            std::string::npos) << p;
}

TEST_F(IncludeLayersTree, BadTablesAreRefusedNamingTheFile) {
  write("layers.toml", "levels = [[\"core\"], [\"ops\", \"core\"]]\n");
  EXPECT_NE(testsupport::error_of([&] { check(); }).find("layers.toml: folder core stands on two levels"),
            std::string::npos);
  write("layers.toml", "levels = [[\"core\"], [\"ops\"], [\"nn\"], [\"gone\"]]\n");
  EXPECT_NE(lines(check()).find("layers.toml names gone, which is no folder"), std::string::npos);
  write("layers.toml", "folders = 3\n");
  EXPECT_NE(testsupport::error_of([&] { check(); }).find("no `levels`"), std::string::npos);
}

}  // namespace
}  // namespace aiscale
