// aiscale: train AI models across GPUs and nodes, measure scaling, plan machines.
#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>

#include "aiscale/cli/commands.h"
#include "aiscale/core/paths.h"
#include "aiscale/parallel/rank_failure.h"
#include "aiscale/train/environment.h"

int main(int argc, char** argv) {
  // A write beyond the file-size limit (ulimit -f) then fails with EFBIG, which the writers
  // report naming the file, instead of killing the process without a word.
  std::signal(SIGXFSZ, SIG_IGN);
  CLI::App app{"aiscale — train AI models across GPUs and nodes, measure how well it scales, "
               "and choose the machine and layout.\nSee docs/ for the user guide."};
  // The version, commit and libraries, and where this binary finds its data (installed copy
  // or source tree).
  app.set_version_flag("--version", [] {
    return aiscale::train::version_text() + aiscale::data_paths_summary();
  });
  app.require_subcommand(1);
  app.fallthrough(false);
  aiscale::cli::add_train_command(app);
  aiscale::cli::add_bench_command(app);
  aiscale::cli::add_sample_command(app);
  aiscale::cli::add_launch_command(app);
  aiscale::cli::add_data_command(app);
  aiscale::cli::add_plan_command(app);
  aiscale::cli::add_scale_command(app);
  aiscale::cli::add_report_command(app);
  aiscale::cli::add_slurm_command(app);
  aiscale::cli::add_tune_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (...) {
    // Printed with the rank when several run, and recorded for `aiscale launch`'s summary
    // (parallel/rank_failure.h).
    return aiscale::parallel::report_failure_at_exit();
  }
  return 0;
}
