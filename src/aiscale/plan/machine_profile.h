// Machine profiles: what `aiscale bench machine` measured on one node (dense GEMM
// throughput per precision, memory, host<->device, peer-to-peer and all-reduce bandwidth,
// and who measured it where), as a TOML file (docs/guide/machine-profile.md). The planner
// takes its figures in place of the datasheet's for the accelerator it was measured on;
// the reports show it beside a study.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "aiscale/plan/calibration.h"

namespace aiscale::plan {

// One GEMM of the model's step as the benchmark ran it (row-major out (m, n) = in (m, k)
// times weight^T), `count` times per step (once per layer, or once for the LM head).
struct GemmShapeFigure {
  std::string name;       // "qkv", "attn_proj", "fc", "fc_proj", "lm_head" + ".fwd/.dinp/.dweight"
  std::string precision;  // "fp32", "tf32", "bf16", "fp16", "fp64"
  int64_t m = 0, n = 0, k = 0;
  int64_t count = 1;
  double tflops = 0;
};

struct PeerFigure {
  int src = 0, dst = 0;
  bool peer_access = false;  // cudaMemcpyPeer over enabled peer access (else staged by the driver)
  double gbs = 0;            // GB/s (1e9 bytes/s), one direction
};

struct MachineProfile {
  std::string file;  // where it was read from ("" while being written)

  // [machine]: who and where
  std::string host, date, aiscale_version, command;
  std::string device_kind;  // "gpu" or "cpu"
  std::string cpu;          // CPU model name (/proc/cpuinfo)
  int cpu_cores = 0;        // logical CPUs of the host
  int threads = 0;          // OpenMP/BLAS threads the CPU figures used
  std::string gpu;          // driver-reported GPU name ("" on CPU profiles)
  int gpu_count = 0;
  double gpu_memory_gib = 0;
  std::string driver;       // CUDA driver version, "13.0"
  int ranks = 1, nodes = 1;

  // [gemm_peak_tflops]: best dense GEMM TFLOP/s of the size sweep, per precision
  std::map<std::string, double> gemm_peak_tflops;
  int64_t gemm_peak_size = 0;  // largest square size swept

  // [gemm_model]: the model's own GEMMs for one micro-batch (optional)
  std::string shapes_model;
  int64_t shapes_batch = 0, shapes_seq = 0;
  std::map<std::string, double> gemm_model_tflops;  // FLOP-weighted over the step's GEMMs
  std::vector<GemmShapeFigure> shapes;

  // [memory_gbs]: STREAM-like copy and triad, GB/s (0: not measured)
  double host_copy_gbs = 0, host_triad_gbs = 0, device_copy_gbs = 0, device_triad_gbs = 0;
  // [transfer_gbs]: host<->device, GB/s (0: not measured)
  double h2d_pinned_gbs = 0, d2h_pinned_gbs = 0, h2d_pageable_gbs = 0, d2h_pageable_gbs = 0;
  // [p2p]: every ordered pair of the node's GPUs (absent with fewer than 2)
  bool p2p_enabled = false;  // every pair has peer access
  std::vector<PeerFigure> peers;
  // [allreduce]: bus bandwidth of the largest message over the launched ranks (absent for 1)
  std::string allreduce_backend;
  int allreduce_ranks = 0;
  double allreduce_bytes = 0, allreduce_busbw_gbs = 0;

  bool is_gpu() const { return device_kind == "gpu"; }
  // The slowest pair's bandwidth (0 when there are no pairs).
  double p2p_min_gbs() const;
  // "machine profile FILE (HOST, DATE)": how figures taken from it name their source.
  std::string label() const;
  // "NVIDIA H100 80GB HBM3" or the CPU model: the device its figures describe.
  std::string device() const { return is_gpu() ? gpu : cpu; }
};

// The profile as TOML text, with comments giving each figure's unit.
std::string machine_profile_toml(const MachineProfile& p);
// Writes it aside and renames it over `path` (never half-written).
void write_machine_profile(const std::string& path, const MachineProfile& p);
// Reads and checks a profile. Throws Error naming the file and the key for a missing or
// malformed file, an unknown or missing key, or a figure that is not positive.
MachineProfile load_machine_profile(const std::string& path);

// The fraction of the measured GEMM throughput at the model's shapes that a whole
// training step keeps (attention, normalisation, activations, loss and the memory-bound
// kernels take the rest), used where no measured training run calibrates the utilisation.
// From GPT-2 124M's op table on one H100 (B=16, T=1024, bf16; docs/results/machine.md): the
// whole step ran at 554 TFLOP/s of hardware FLOPs against 666.8 TFLOP/s for the model's own
// GEMMs in `bench machine`, 0.83; taken as 0.80 for models with a larger attention share.
inline constexpr double kStepShareOfGemm = 0.80;

// Whether the profile describes this partition's device: its GPU name matches the
// partition's accelerator (GPU partitions), or its CPU name the partition's CPU model
// (CPU partitions). When not, `why` says which device each names.
bool profile_applies(const MachineProfile& p, const Partition& part, const Catalog& cat,
                     std::string* why = nullptr);

// Replaces the datasheet-based figures of `m` (those not already measured by a
// --calibration result) with the profile's where it applies to the target: utilisation
// (from the GEMM throughput at the model's shapes, or the sweep's peak, × kStepShareOfGemm,
// over the datasheet peak), intra-node bandwidth (all-reduce bus bandwidth, else the
// slowest peer-to-peer pair) and memory bandwidth (device triad, host triad on CPU nodes).
void apply_machine_profile(const MachineProfile& p, const Target& t, const Workload& w,
                           Precision precision, const Catalog& cat, MachineFigures& m);

// Loads the profile into the calibration (its file and a note saying what it covers) and
// returns one warning per planned partition whose device the profile does not describe.
std::vector<std::string> attach_machine_profile(const std::string& path, const Catalog& cat,
                                                const std::vector<Target>& targets,
                                                Calibration& cal);

}  // namespace aiscale::plan
