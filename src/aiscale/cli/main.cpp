// aiscale: train AI models across GPUs and nodes, measure scaling, plan machines.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>

#include "aiscale/cli/commands.h"
#include "aiscale/core/error.h"
#include "aiscale/core/log.h"

int main(int argc, char** argv) {
  CLI::App app{"aiscale — train AI models across GPUs and nodes, measure how well it scales, "
               "and choose the machine and layout.\nSee docs/ for the user guide."};
  app.set_version_flag("--version", std::string("aiscale ") + AISCALE_VERSION);
  app.require_subcommand(1);
  app.fallthrough(false);
  aiscale::cli::add_train_command(app);
  aiscale::cli::add_bench_command(app);
  aiscale::cli::add_sample_command(app);
  aiscale::cli::add_launch_command(app);
  aiscale::cli::add_data_command(app);
  aiscale::cli::add_plan_command(app);
  aiscale::cli::add_slurm_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const aiscale::Error& e) {
    aiscale::log::error("{}", e.what());
    return 1;
  } catch (const std::exception& e) {
    aiscale::log::error("{}", e.what());
    return 2;
  }
  return 0;
}
