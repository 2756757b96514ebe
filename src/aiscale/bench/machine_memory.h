// The sizes of `aiscale bench machine` checked against the host's and the GPU's memory
// before anything is measured: a size that cannot fit would otherwise fail (or be killed
// by the kernel) minutes into the run, after the measurements before it.
#pragma once
#include <cstdint>
#include <string>

namespace aiscale::bench {

// Bytes a measurement may use: the host's available memory (MemAvailable, or what the
// process's cgroup still allows, whichever is lower) and the GPU's memory (0 on a CPU run),
// each less a reserve for the rest of the process (a tenth of the host's; 1 GiB of the
// GPU's for the CUDA context and cuBLASLt's workspace).
struct MachineMemory {
  double host_bytes = 0;
  double device_bytes = 0;
};
MachineMemory usable_memory(double device_total_bytes);

// The sizes a run uses (the options with the device's defaults) and where they come from.
struct MachineSizes {
  bool gpu = false;
  std::string model;            // the GPT preset whose GEMM shapes are measured
  int64_t batch = 1, seq = 1;   // tokens of the model's GEMMs
  bool seq_named = false;       // --seq given and --batch not: name --seq in a refusal
  int64_t max_size = 0;         // the largest square GEMM of the sweep
  int64_t stream_bytes = 0;     // per array of the bandwidth tests
  int64_t allreduce_bytes = 0;  // the all-reduce's message (world > 1 only)
  int world = 1;
  int ranks_per_host = 1;       // ranks sharing this host's memory in the all-reduce
};

// Throws aiscale::Error naming the option, what needs the memory, how much, how much there
// is, and the largest value of the option that fits, for the first size that does not fit.
void check_sizes_fit(const MachineSizes& s, const MachineMemory& memory);

}  // namespace aiscale::bench
