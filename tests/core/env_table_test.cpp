// Every AISCALE_* environment variable named in the sources is in core/env.cpp's table, so
// the table stays the whole list of the product's variables (name, values, default, purpose).
#include <gtest/gtest.h>

#include <cstdlib>
#include <exception>
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

// A variable with a list of values: the set one, the fallback when unset, and a clear
// error naming the variable, the value and the list for anything else.
TEST(EnvTable, ChoiceAcceptsTheListedValuesOnly) {
  const char* name = "AISCALE_CUDNN_CONV_ENGINES";
  unsetenv(name);
  EXPECT_EQ(aiscale::env::choice(name), "auto");
  setenv(name, "exhaustive", 1);
  EXPECT_EQ(aiscale::env::choice(name), "exhaustive");
  setenv(name, "exhaust", 1);  // a prefix of a listed value is not one
  try {
    (void)aiscale::env::choice(name);
    ADD_FAILURE() << "no error for 'exhaust'";
  } catch (const std::exception& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("AISCALE_CUDNN_CONV_ENGINES = 'exhaust' is not one of auto | exhaustive | legacy"),
              std::string::npos) << m;
  }
  unsetenv(name);
}
