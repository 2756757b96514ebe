// The machine benchmark (`aiscale bench machine`): what one node can do, measured —
// dense GEMM throughput per precision over a size sweep and at a model's own GEMM shapes,
// memory bandwidth (host, device), host<->device and peer-to-peer bandwidth, and all-reduce
// bus bandwidth over the ranks it is launched on — as the machine profile the planner
// reads (plan/machine_profile.h).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "aiscale/parallel/comm.h"
#include "aiscale/plan/machine_profile.h"

namespace aiscale::bench {

struct MachineBenchOptions {
  std::string device = "auto";  // "auto" (cuda where a GPU is visible), "cpu" or "cuda"
  std::string model = "gpt2-124m";  // GPT preset whose GEMM shapes are measured
  int64_t batch = 0;        // sequences per micro-batch; 0: 1 on CPUs, 16 on GPUs (--quick: 1, 4)
  int64_t seq = 0;          // tokens per sequence; 0: 128 on CPUs, 1024 on GPUs (--quick: 32, 256)
  int64_t max_size = 0;     // largest square GEMM of the sweep; 0: 2048 CPU, 8192 GPU (--quick: 512, 2048)
  int64_t stream_mib = 0;   // MiB per array of the bandwidth tests; 0: 32 CPU, 256 GPU (--quick: 8, 64)
  int64_t allreduce_bytes = 0;  // message of the all-reduce; 0: 16 MiB CPU, 256 MiB GPU (--quick: 1, 32 MiB)
  int64_t repeats = 0;      // timed repeats per figure (the median counts); 0: 3 CPU, 5 GPU (--quick: 2)
  int64_t threads = 0;      // CPU threads (OpenMP, OpenBLAS); 0: all cores
  bool quick = false;       // small sizes and few repeats (tests, a first look)
  std::string command;      // the command line, for the profile
};

// One GEMM in row-major terms: out (m, n) = op(A) (m, k) · op(B) (k, n), `count` times a step.
struct GemmShape {
  std::string name;
  int64_t m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  int64_t count = 1;
  double flops() const { return 2.0 * double(m) * double(n) * double(k); }
};

// The GEMMs of one training step of a GPT preset on batch × seq tokens: for the block's
// QKV, attention projection, MLP up and down projections (each n_layer times) and the LM
// head, the forward, input-gradient and weight-gradient products. The LM head covers the
// vocabulary rounded up to `vocab_multiple` (the CUDA model pads it to a multiple of 128).
std::vector<GemmShape> gpt_step_gemms(const std::string& model, int64_t batch, int64_t seq,
                                      int64_t vocab_multiple = 1);

// Runs every measurement (the node-local ones on rank 0, the all-reduce on every rank),
// calls on_result with one JSON record per figure on rank 0 as it is measured, and returns
// the profile (complete on rank 0). Progress goes to stderr.
plan::MachineProfile run_machine_bench(const MachineBenchOptions& o, parallel::Communicator& comm,
                                       const std::function<void(const nlohmann::json&)>& on_result);

// The device a run measures: "cuda" or "cpu" for `device` ("auto": cuda when this build
// has CUDA and a GPU is visible). Throws Error for cuda without a GPU.
std::string machine_bench_device(const std::string& device);

// The command line of this process (/proc/self/cmdline), words joined by spaces.
std::string this_command_line();

}  // namespace aiscale::bench
