// aiscale bench vision: ResNet training throughput on synthetic images (bench/vision.h).
#include <cstdio>
#include <fstream>
#include <memory>

#include "aiscale/bench/vision.h"
#include "aiscale/cli/commands.h"
#include "aiscale/cli/options.h"
#include "aiscale/core/error.h"
#include "aiscale/nn/models/resnet_config.h"
#include "aiscale/parallel/comm.h"

namespace aiscale::cli {

void add_bench_vision_command(CLI::App* bench) {
  struct Args {
    bench::VisionBenchOptions o;
    std::string communicator = "auto";
    std::string output;
  };
  auto args = std::make_shared<Args>();
  auto* cmd = bench->add_subcommand(
      "vision",
      "ResNet training throughput on synthetic images held in memory (on the GPU with "
      "--device cuda: NHWC, cuDNN, fp32 or bf16/fp16 AMP): images/s, median and p90 step "
      "time, achieved FLOP/s (3x the forward's), peak memory; several ranks (mpirun, "
      "aiscale launch) add the gradient all-reduce of data parallelism (NCCL on GPUs)");
  cmd->add_option("--model", args->o.model, "ResNet preset")
      ->capture_default_str()
      ->check(CLI::IsMember(nn::resnet_preset_names()));
  cmd->add_option("--device", args->o.device, "cpu or cuda (one GPU per rank)")
      ->capture_default_str()
      ->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--precision", args->o.precision,
                  "cuda: fp32, or bf16 / fp16 AMP (16-bit activations, fp32 master weights)")
      ->capture_default_str()
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  cmd->add_flag("--tf32", args->o.tf32,
                "cuda fp32: let cuDNN use TF32 tensor cores (off by default, as PyTorch's fp32 "
                "peer measures)");
  cmd->add_option("--batchnorm", args->o.batchnorm,
                  "cuda: batch norm kernels, auto (cudnn for bf16 and fp16, own for fp32: the "
                  "faster measured), own (deterministic) or cudnn (cuDNN's fused kernels where "
                  "cuDNN takes the layer; bf16 and fp16 only, fp32 keeps the own)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "own", "cudnn"}));
  cmd->add_option("--cudnn-workspace-mib", args->o.cudnn_workspace_mib,
                  "cuda: MiB of cuDNN workspace, allocated once; the convolution search only "
                  "times engines that fit it; -1: the GPU's free memory beside the model, less "
                  "2 GiB, within 512 MiB..16 GiB")
      ->capture_default_str()
      ->check(integer_in(-1, int64_t{1} << 20));
  cmd->add_flag("!--no-overlap", args->o.overlap,
                "cuda ranks: one gradient all-reduce after the backward instead of ~25 MiB "
                "buckets started during it");
  cmd->add_option("--batch-size", args->o.batch_size,
                  "images per rank; 0 = 16 on the CPU, 256 on a GPU")
      ->capture_default_str()
      ->check(integer_in(0, int64_t{1} << 20));
  cmd->add_option("--image-size", args->o.image_size,
                  "square image size; 0 = the preset's (224, or 28 for resnet-small)")
      ->capture_default_str()
      ->check(integer_in(0, 1 << 16));
  cmd->add_option("--steps", args->o.steps, "timed steps")->capture_default_str()
      ->check(integer_in(1, int64_t{1} << 40));
  cmd->add_option("--warmup", args->o.warmup, "untimed steps first")->capture_default_str()
      ->check(integer_in(0, int64_t{1} << 40));
  cmd->add_option("--threads", args->o.threads, "CPU threads; 0 = all cores")
      ->capture_default_str()
      ->check(integer_in(0, 4096));
  cmd->add_option("--communicator", args->communicator,
                  "auto (several ranks: NCCL with --device cuda, else MPI, or TCP without an MPI launcher), mpi, tcp, nccl or none")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "mpi", "tcp", "nccl", "none"}));
  cmd->add_option("--output,-o", args->output, "also append the JSON line to this file");
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
