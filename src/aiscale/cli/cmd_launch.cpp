// aiscale launch: start N local ranks of an aiscale command through mpirun.
#include <memory>

#include <fmt/format.h>

#include "aiscale/cli/command_check.h"
#include "aiscale/cli/commands.h"
#include "aiscale/cli/help_text.h"
#include "aiscale/cli/options.h"
#include "aiscale/core/error.h"
#include "aiscale/core/exception_text.h"
#include "aiscale/launch/local.h"

namespace aiscale::cli {

void add_launch_command(CLI::App& app) {
  const HelpSection help("launch", "launch");
  auto l = std::make_shared<launch::LocalLaunch>();
  auto dry = std::make_shared<bool>(false);
  auto* cmd = app.add_subcommand("launch", help.about());
  help.option(cmd, "-n,--ranks", l->ranks)->capture_default_str()->check(integer_in(1, 65536));
  help.option(cmd, "--threads-per-rank", l->threads_per_rank)
      ->capture_default_str()->check(thread_count());
  help.option(cmd, "--mpirun", l->mpirun)->capture_default_str();
  help.option(cmd, "--mpirun-arg", l->extra_mpirun_args);
  help.flag(cmd, "--dry-run", *dry);
  help.option(cmd, "command", l->command)->required();
  cmd->callback([l, dry] {
    // The command is parsed here, once, before any rank starts: a typo is one message, not
    // one per rank after mpirun has started them all.
    if (const std::string why = aiscale_command_error(l->command); !why.empty())
      fail("launch: the command after -- is not one aiscale runs ({}): {}", fmt::join(l->command, " "), why);
    if (*dry) {
      fmt::print("{}\n", fmt::join(launch::local_launch_argv(*l, "aiscale"), " "));
      return;
    }
    const int status = launch::run_local_launch(*l);
    if (status != 0) throw ReportedFailure(status);  // the ranks and the summary said why
  });
}

}  // namespace aiscale::cli
