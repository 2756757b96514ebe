// aiscale bench vision: ResNet training throughput on synthetic images (bench/vision.h).
#include <cstdio>
#include <fstream>
#include <memory>

#include "aiscale/bench/vision.h"
#include "aiscale/cli/commands.h"
#include "aiscale/cli/help_text.h"
#include "aiscale/cli/options.h"
#include "aiscale/core/error.h"
#include "aiscale/nn/models/resnet_config.h"
#include "aiscale/parallel/comm.h"

namespace aiscale::cli {

void add_bench_vision_command(CLI::App* bench) {
  const HelpSection help("bench", "vision");
  struct Args {
    bench::VisionBenchOptions o;
    std::string communicator = "auto";
    std::string output;
  };
  auto args = std::make_shared<Args>();
  auto* cmd = bench->add_subcommand("vision", help.about());
  help.option(cmd, "--model", args->o.model)->capture_default_str()
      ->check(CLI::IsMember(nn::resnet_preset_names()));
  help.option(cmd, "--device", args->o.device)->capture_default_str()
      ->check(CLI::IsMember({"cpu", "cuda"}));
  help.option(cmd, "--precision", args->o.precision)->capture_default_str()
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  help.flag(cmd, "--tf32", args->o.tf32);
  help.option(cmd, "--batchnorm", args->o.batchnorm)->capture_default_str()
      ->check(CLI::IsMember({"auto", "own", "cudnn"}));
  help.option(cmd, "--cudnn-workspace-mib", args->o.cudnn_workspace_mib)->capture_default_str()
      ->check(integer_in(-1, int64_t{1} << 20));
  help.flag(cmd, "!--no-overlap", args->o.overlap);
  help.option(cmd, "--batch-size", args->o.batch_size)->capture_default_str()
      ->check(integer_in(0, int64_t{1} << 20));
  help.option(cmd, "--image-size", args->o.image_size)->capture_default_str()
      ->check(integer_in(0, 1 << 16));
  help.option(cmd, "--steps", args->o.steps)->capture_default_str()
      ->check(integer_in(1, int64_t{1} << 40));
  help.option(cmd, "--warmup", args->o.warmup)->capture_default_str()
      ->check(integer_in(0, int64_t{1} << 40));
  help.option(cmd, "--threads", args->o.threads)->capture_default_str()->check(integer_in(0, 4096));
  help.option(cmd, "--communicator", args->communicator)->capture_default_str()
      ->check(CLI::IsMember({"auto", "mpi", "tcp", "nccl", "none"}));
  help.option(cmd, "--output,-o", args->output);
  cmd->callback([args] {
    parallel::CommOptions co;
    co.kind = args->communicator;
    co.device = args->o.device;
    auto comm = parallel::make_communicator(co);
    check_output_before_measuring(*comm, args->output, "--output");
    const nlohmann::json j = bench::run_vision_bench(args->o, *comm);
    if (comm->rank() != 0) return;
    std::printf("%s\n", j.dump().c_str());
    std::fflush(stdout);
    if (!args->output.empty()) {
      std::ofstream out(args->output, std::ios::app);
      if (!out)
        fail("cannot append to results file '{}': check the folder exists and is writable",
             args->output);
      out << j.dump() << "\n";
    }
  });
}

}  // namespace aiscale::cli
