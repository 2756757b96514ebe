// `aiscale launch` parses the command after -- before it starts mpirun: a command this
// aiscale does not run is one message, not one per rank after every rank has started.
#include <gtest/gtest.h>

#include "../support/run_support.h"

namespace {

using aiscale::testsupport::run_aiscale;

TEST(LaunchCommand, ACommandAiscaleDoesNotRunIsRefusedBeforeAnyRankStarts) {
  auto r = run_aiscale("launch -n 2 -- trian --config configs/quickstart.toml");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("launch: the command after -- is not one aiscale runs (trian --config "
                          "configs/quickstart.toml): 'trian' is not an aiscale command"),
            std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("mpirun"), std::string::npos) << r.output;  // never started
  r = run_aiscale("launch -n 2 -- train --no-such-option");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("The following argument was not expected: --no-such-option"),
            std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("mpirun"), std::string::npos) << r.output;
  // A command it runs passes the check (--dry-run prints mpirun's command line).
  r = run_aiscale("launch -n 2 --dry-run -- train --config configs/quickstart.toml");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("mpirun -np 2"), std::string::npos) << r.output;
}

}  // namespace
