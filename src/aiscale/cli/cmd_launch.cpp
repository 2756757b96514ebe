// aiscale launch: start N local ranks of an aiscale command through mpirun.
#include <memory>

#include <fmt/format.h>

#include "aiscale/cli/command_check.h"
#include "aiscale/cli/commands.h"
#include "aiscale/cli/options.h"
#include "aiscale/core/error.h"
#include "aiscale/core/exception_text.h"
#include "aiscale/launch/local.h"

namespace aiscale::cli {

void add_launch_command(CLI::App& app) {
  auto l = std::make_shared<launch::LocalLaunch>();
  auto dry = std::make_shared<bool>(false);
  auto* cmd = app.add_subcommand(
      "launch",
      "Start N ranks of an aiscale command on this machine (through OpenMPI's mpirun), e.g.\n"
      "  aiscale launch -n 2 -- train --config configs/quickstart.toml\n"
      "A rank that dies ends the others; when the job fails, the last line says which ranks failed "
      "and why, and the exit status is mpirun's. On clusters use srun or mpirun directly "
      "(docs/guide/launching.md).");
  cmd->add_option("-n,--ranks", l->ranks, "number of ranks")->capture_default_str()->check(integer_in(1, 65536));
  cmd->add_option("--threads-per-rank", l->threads_per_rank,
                  "OpenMP/BLAS threads per rank (0 = cores / ranks)")->capture_default_str()
      ->check(thread_count());
  cmd->add_option("--mpirun", l->mpirun, "mpirun executable")->capture_default_str();
  cmd->add_option("--mpirun-arg", l->extra_mpirun_args, "extra argument for mpirun (repeatable)");
  cmd->add_flag("--dry-run", *dry, "print the mpirun command instead of running it");
  cmd->add_option("command", l->command, "the aiscale command and its arguments, after --")->required();
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
