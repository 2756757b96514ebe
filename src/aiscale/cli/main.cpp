// aiscale: train AI models across GPUs and nodes, measure scaling, plan machines.
#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <new>

#include <nlohmann/json.hpp>

#include "aiscale/cli/commands.h"
#include "aiscale/core/error.h"
#include "aiscale/core/log.h"
#include "aiscale/core/paths.h"

int main(int argc, char** argv) {
  // A write beyond the file-size limit (ulimit -f) then fails with EFBIG, which the writers
  // report naming the file, instead of killing the process without a word.
  std::signal(SIGXFSZ, SIG_IGN);
  CLI::App app{"aiscale — train AI models across GPUs and nodes, measure how well it scales, "
               "and choose the machine and layout.\nSee docs/ for the user guide."};
  // The version and where this binary finds its data (installed copy or source tree).
  app.set_version_flag("--version", [] {
    return std::string("aiscale ") + AISCALE_VERSION + "\n" + aiscale::data_paths_summary();
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
  } catch (const aiscale::Error& e) {
    aiscale::log::error("{}", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    aiscale::log::error("out of memory: the model, batch or data asked for more memory than this "
                        "machine has; use a smaller model, train.batch_size or train.seq_len");
    return 1;
  } catch (const std::filesystem::filesystem_error& e) {
    aiscale::log::error("file system error on '{}'{}: {}; check the path, its permissions and "
                        "the free space", e.path1().string(),
                        e.path2().empty() ? "" : " -> '" + e.path2().string() + "'",
                        e.code().message());
    return 1;
  } catch (const nlohmann::json::exception& e) {
    aiscale::log::error("malformed JSON in an input file: {}", e.what());
    return 1;
  } catch (const std::exception& e) {
    aiscale::log::error("{}", e.what());
    return 2;
  }
  return 0;
}
