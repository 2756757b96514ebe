// The subcommands' help prose lives in src/aiscale/cli/help/*.md: every option that asks for
// a description finds one, and every description in the files belongs to an option.
#include <gtest/gtest.h>

#include "aiscale/cli/commands.h"
#include "aiscale/cli/help_text.h"
#include "aiscale/core/error.h"

namespace aiscale {
namespace {

TEST(CliHelp, EveryHelpEntryBelongsToAnOptionAndEveryOptionFindsItsEntry) {
  CLI::App app("test");
  // Each looks its descriptions up while it adds its options: a missing entry throws here.
  ASSERT_NO_THROW({
    cli::add_train_command(app);
    cli::add_bench_command(app);
    cli::add_sample_command(app);
    cli::add_launch_command(app);
    cli::add_data_command(app);
    cli::add_plan_command(app);
    cli::add_scale_command(app);
    cli::add_report_command(app);
    cli::add_slurm_command(app);
    cli::add_tune_command(app);
  });
  // What none asked for names no option (or a renamed one).
  EXPECT_EQ(cli::unused_help_entries(), std::vector<std::string>{});
}

TEST(CliHelp, ParagraphsLineBreaksAndExampleLines) {
  const cli::HelpSection launch("launch", "launch");
  // Lines of a paragraph are joined; a blank line is a line break; an indented line stays.
  EXPECT_NE(launch.about().find("(through OpenMPI's mpirun), e.g.\n  aiscale launch -n 2 -- "
                                "train --config configs/quickstart.toml\nA rank that dies"),
            std::string::npos)
      << launch.about();
  EXPECT_THROW(launch.of("--no-such-option"), Error);
  EXPECT_THROW(cli::HelpSection("launch", "no-such-section").about(), Error);
}

}  // namespace
}  // namespace aiscale
