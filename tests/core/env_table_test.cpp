// Every AISCALE_* environment variable named in the sources is in core/env.cpp's table, so
// the table stays the whole list of the product's variables (name, values, default, purpose).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "aiscale/core/env.h"

namespace fs = std::filesystem;

TEST(EnvTable, EveryVariableTheSourcesNameIsRegistered) {
  const fs::path src = fs::path(AISCALE_TEST_DATA_DIR).parent_path() / "src";
  ASSERT_TRUE(fs::is_directory(src)) << src;
  const std::regex quoted("\"(AISCALE_[A-Z0-9_]+)\"");
  std::set<std::string> named;
  for (const auto& e : fs::recursive_directory_iterator(src)) {
    if (!e.is_regular_file()) continue;
    std::ifstream in(e.path());
    std::stringstream text;
    text << in.rdbuf();
    const std::string s = text.str();
    for (std::sregex_iterator it(s.begin(), s.end(), quoted), end; it != end; ++it)
      named.insert((*it)[1].str());
  }
  EXPECT_GE(named.size(), 10u);  // the search found the sources' variables
  for (const auto& name : named)
    EXPECT_NO_THROW(aiscale::env::variable(name.c_str())) << name << " is not in core/env.cpp's table";
  size_t count = 0;
  const aiscale::env::Variable* table = aiscale::env::variables(&count);
  for (size_t i = 0; i < count; ++i) EXPECT_GT(std::string(table[i].purpose).size(), 10u) << table[i].name;
}
