// `aiscale --version` names what a binary was built from and with: the version, the commit,
// the build, and the libraries (a bug report or a result needs them).
#include <gtest/gtest.h>

#include "../support/run_support.h"
#include "aiscale/core/build_info.h"

using namespace aiscale::testsupport;

TEST(Version, NamesTheCommitTheBuildAndTheLibraries) {
  const auto r = run_aiscale("--version");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const aiscale::BuildInfo& b = aiscale::build_info();
  EXPECT_EQ(r.output.rfind("aiscale " + b.version + " (commit " + b.git_commit + ", ", 0), 0u)
      << r.output;
  EXPECT_NE(r.output.find(b.cuda ? "built with: CUDA (nvcc " : "built with: CPU only (no CUDA)"),
            std::string::npos) << r.output;
  EXPECT_NE(r.output.find("runs with: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("OpenBLAS"), std::string::npos) << r.output;  // always linked
  EXPECT_NE(r.output.find("systems catalogue: "), std::string::npos) << r.output;
}
