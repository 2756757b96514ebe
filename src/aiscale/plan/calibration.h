// Calibration from measured runs: reads `aiscale bench` result files (JSON Lines) and
// turns them into the figures the performance model uses — utilisation of the dense
// peak (from "language" results), ring bus bandwidth (from "allreduce" results) and the
// copy-engine transport's slowdown (from multi-GPU "language" results over the copy
// engines that carry their 1-GPU baseline) — in place of the datasheet-based defaults.
// Every figure says where it came from.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "aiscale/plan/assumptions.h"
#include "aiscale/plan/catalog.h"
#include "aiscale/plan/workload.h"

namespace aiscale::plan {

// One number and its provenance: measured (file:line) or a datasheet-based assumption.
struct Figure {
  double value = 0;
  bool measured = false;
  std::string source;
};

struct MfuSample {
  std::string accelerator_id, device, model, host, date;
  Precision precision = Precision::bf16;
  int64_t n_params = 0;
  int world_size = 1;
  int threads = 0;              // CPU results: cores the rank used (accelerator_id "cpu:<id>")
  double achieved_tflops = 0;   // per device, hardware FLOPs (recomputation added back), over
                                // the step without the planner's AdamW estimate (optimizer_s)
  double optimizer_s = 0;       // that estimate, taken out of the measured step (0: none)
  double utilisation = 0;       // achieved / dense peak of that precision
  bool cnn = false;             // a CNN's run (`bench vision`), else a transformer's
  // A transformer's family ("gpt2", "llama"): the result's "family", or from its model name
  // for results written before the bench reported it.
  std::string family;
  double gemm_elements = 0;     // batch × seq × n_embd of the run (0: not in the result)
  // Step-to-step spread, as a fraction of the median step: (p90 − median) / (1.2816 ×
  // median), the standard deviation of a normal spread; 0 where the result has no p90.
  double step_spread = 0;
  std::string source;           // "file:line"
};

struct BusSample {
  std::string accelerator_id, device, system_id, backend;
  int world_size = 0;
  int nodes = 1;
  double bytes = 0;
  double busbw_bytes_per_s = 0;
  std::string source;
};

// A data-parallel step over aiscale's copy engines (ZeRO 0, no accumulation) and the
// 1-GPU step it was measured against (`--baseline-tokens-per-s`).
struct CopyEngineSample {
  std::string accelerator_id, device;
  int64_t n_params = 0;
  int world_size = 0;
  double step_s = 0;      // on world_size GPUs
  double baseline_s = 0;  // the same batch per GPU on one GPU
  std::string source;
};

// `aiscale bench loader`: images/s one worker thread decodes and augments.
struct LoaderSample {
  int threads = 0;
  double images_per_s_per_thread = 0;
  std::string host, source;
};

struct MachineProfile;  // machine_profile.h

struct Calibration {
  std::vector<MfuSample> utilisation;
  std::vector<BusSample> bandwidth;
  std::vector<CopyEngineSample> copy_engine;
  std::vector<LoaderSample> loader;  // the run with the most threads
  std::vector<std::string> notes;  // lines read but not used, and why
  std::vector<std::string> files;
  // `aiscale plan --machine-profile`: its figures stand in for the datasheet's where no
  // result above measures them (machine_profile.h).
  std::shared_ptr<const MachineProfile> machine_profile;

  bool empty() const { return utilisation.empty() && bandwidth.empty() && copy_engine.empty(); }
  // The measurement of this kind of model (CNN or transformer) on this accelerator and
  // precision whose model size is closest (in log scale) to n_params, among 1-GPU runs
  // where there are any, and among runs of the transformer family `family` (non-empty)
  // where there are any: a Llama's wider MLP and larger vocabulary run its GEMMs at
  // another utilisation than a GPT-2 of the same size; nullptr when there is none.
  const MfuSample* closest_utilisation(std::string_view accelerator_id, Precision p,
                                       int64_t n_params, bool cnn = false,
                                       std::string_view family = {}) const;
  // CPU model `cpu_id`: the measurement whose thread count is closest (in log scale) to
  // `cores` (a node's), then whose model size is closest; nullptr when there is none.
  const MfuSample* closest_cpu_utilisation(std::string_view cpu_id, int cores,
                                           int64_t n_params) const;
  // Largest-message single-node all-reduce on this accelerator (preferring one that names
  // this system); nullptr when there is none.
  const BusSample* intra_node(std::string_view accelerator_id, std::string_view system_id) const;
  // Largest-message multi-node all-reduce that names this system.
  const BusSample* inter_node(std::string_view system_id) const;
  // The copy-engine run on this accelerator whose model size is closest (log scale), then
  // with the most GPUs; nullptr when there is none.
  const CopyEngineSample* closest_copy_engine(std::string_view accelerator_id, int64_t n_params) const;
};

// The catalogue accelerator whose device_names best (longest) match a driver-reported
// name such as "NVIDIA H100 80GB HBM3"; "" when none does.
std::string match_device(const Catalog& cat, std::string_view device_name);
// The same for CPU models ([[cpu]] device_names): the id, or "" when none matches.
std::string match_cpu(const Catalog& cat, std::string_view device_name);

// Reads each path (a .jsonl file, or a directory of them). Throws Error naming file and
// line for malformed JSON or a result that lacks the fields it needs.
Calibration load_calibration(const std::vector<std::string>& paths, const Catalog& cat);

// The figures one partition runs at for a workload and precision: the datasheet peak,
// utilisation and bandwidths, measured where the calibration has them (machine_figures.cpp).
struct MachineFigures {
  double peak_flops = 0;            // dense, this precision
  Figure utilisation;               // of peak_flops
  // x of the shape the utilisation holds at (Assumptions::gemm_half_elements): a measured
  // run's batch × seq × width; 0 for the datasheet figure, which holds for large GEMMs.
  double utilisation_at_elements = 0;
  // Where the GEMMs run at half the utilisation (elements of one layer's activation per
  // GPU): Assumptions::gemm_half_elements, or fitted to a measured micro-batch/width sweep
  // (fit_gemm_curve); 0: the assumption.
  Figure gemm_half_elements;
  bool cpu_or_cnn = false;          // no GEMM-size curve (utilisation_at)
  Figure intra_bytes_per_s;         // per GPU, one direction, achievable
  Figure node_bytes_per_s;          // per node, achievable injection bandwidth
  Figure hbm_bytes_per_s;           // for the optimizer step
  // aiscale's copy-engine transport: how much slower every kernel of a step runs while it
  // exchanges (Assumptions::copy_engine_slowdown, or from a measured copy-engine run).
  Figure copy_engine_slowdown;
  // Step-to-step spread of one device's step (standard deviation / median): what a
  // synchronous step over n ranks loses waiting for the slowest (perf.h, straggler_s).
  // From the calibration runs' p90 where they have one, else Assumptions::step_spread_*.
  Figure step_spread;
};
MachineFigures machine_figures(const Target& t, const Workload& w, Precision p,
                               const Calibration& cal, const Catalog& cat, const Assumptions& a);

// The GEMM-size curve u(x) = u_max · x / (x + h) fitted to 1-GPU measurements of one
// accelerator and precision at two or more shapes x (batch × seq × width), by least
// squares on 1/u = 1/u_max + (h/u_max) / x. nullopt when fewer than two shapes or the fit
// is not a rising, saturating curve.
struct GemmCurve {
  double u_max = 0, half_elements = 0;
  int samples = 0;
  std::string sources;
};
// Runs of one transformer family only (`family`): a Llama's and a GPT-2's GEMMs of the same
// activation size are of other shapes, so a curve through both would fit their difference.
std::optional<GemmCurve> fit_gemm_curve(const Calibration& cal, std::string_view accelerator_id,
                                        Precision p, std::string_view family = "gpt2");

// The utilisation of one GPU whose layers' activations hold `elements` elements (micro-batch
// × sequence × width / tensor size): m.utilisation scaled by the GEMM-size curve of
// Assumptions::gemm_half_elements from the shape it holds at. CPU nodes and CNNs: unscaled.
double utilisation_at(const MachineFigures& m, double elements, const Assumptions& a);

}  // namespace aiscale::plan
