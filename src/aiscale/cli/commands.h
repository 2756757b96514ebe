// One function per subcommand, each in its own cmd_<name>.cpp. main.cpp lists them.
#pragma once
#include <string>

#include <CLI/CLI.hpp>

namespace aiscale::parallel {
class Communicator;
}

namespace aiscale::cli {
// Each adds its subcommand to `app` and sets the callback that runs it. The callback
// throws aiscale::Error for user mistakes; main prints it and exits 1.
void add_train_command(CLI::App& app);
void add_bench_command(CLI::App& app);
// `bench vision` (cmd_bench_vision.cpp), added by add_bench_command.
void add_bench_vision_command(CLI::App* bench);
// For the bench subcommands (cmd_bench.cpp): an output file (`what`: the option) checked
// before anything is measured, by rank 0, which writes it; every rank stops alike when it
// cannot be written, rank 0 saying why. Nothing for an empty path.
void check_output_before_measuring(parallel::Communicator& comm, const std::string& path,
                                   const std::string& what);
void add_sample_command(CLI::App& app);
void add_launch_command(CLI::App& app);
void add_data_command(CLI::App& app);
void add_plan_command(CLI::App& app);
void add_scale_command(CLI::App& app);
void add_report_command(CLI::App& app);
void add_slurm_command(CLI::App& app);
void add_tune_command(CLI::App& app);
}  // namespace aiscale::cli
