// The --explain texts: figures with their sources, calibration, assumptions (report_explain.h).
#include "aiscale/plan/report_explain.h"

#include <fmt/format.h>

#include "aiscale/plan/units.h"

namespace aiscale::plan {
namespace {

std::string assumptions_text(const Assumptions& a, GradTransport transport) {
  std::string ce;
  if (transport == GradTransport::copy_engine)
    ce = fmt::format(" With the copy-engine transport the exchange hides behind backward while "
                     "it fits, and every kernel of the step runs slower by the copy-engine "
                     "slowdown ({:.1f}% where no copy-engine run calibrates it, as measured on "
                     "NVLink H200s).", a.copy_engine_slowdown * 100);
  return fmt::format(
      "Model assumptions (not measurements; see docs/guide/planner.md): ring latency {:.0f} µs inside a "
      "node and {:.0f} µs across nodes per step; gradient buckets of whole layers, at least {:.0f} MiB, {:.0f} bytes per "
      "gradient; communication across nodes hides behind {:.0f}% of the compute it overlaps; "
      "inside a node behind all of it, each collective beside compute costing {:.2f} ms "
      "(measured on NVLink H200s); Dragonfly / Dragonfly+ keep {:.0f}% / "
      "{:.0f}% of network bandwidth beyond one group of {} nodes (fat tree: 100%), times the congestion "
      "of a global taper of {:.2f} where the catalogue gives none; workspace "
      "{:.1f} GiB + {:.0f}% per GPU; GEMMs at half their rate where one layer's activation on a "
      "GPU holds {:.2g} elements (micro-batch × sequence × width / tensor size); job start-up "
      "{:.0f} s + {:.1f} s per node; an allocated GPU without a rank (the rest of a node with fewer "
      "ranks than GPUs) at {:.0f}% of its board power; a filesystem of {:.0f} GB/s where the "
      "catalogue gives none, {:.0f}% of it per job; {:.0f} images/s decoded per core, {:.0f} "
      "cores per GPU where the site gives none.{}\n",
      a.alpha_intra_s * 1e6, a.alpha_inter_s * 1e6, a.bucket_bytes / kMiB, a.grad_comm_bytes,
      a.comm_overlap * 100, a.collective_overlap_cost_s * 1e3,
      a.topology.dragonfly_global * 100, a.topology.dragonfly_plus_global * 100,
      a.topology.default_group_nodes, a.topology.global_taper, a.memory.fixed_bytes / kGiB,
      a.memory.fragmentation * 100, a.gemm_half_elements, a.startup_fixed_s, a.startup_per_node_s,
      a.idle_power_fraction * 100, a.epoch.storage_gbytes_per_s, a.epoch.storage_share * 100,
      a.epoch.decode_images_per_s_per_core, a.epoch.loader_cores_per_gpu, ce);
}

// The optimizer offload's assumptions, when the plan offloads (--offload-optimizer).
std::string offload_text(const PlanRequest& r, const Assumptions& a) {
  if (!r.pins.offload) return "";
  return fmt::format("Optimizer offload (--offload-optimizer): the update copies each rank's fp32 "
                     "gradient shard to the host and its new working copy back at {:.0f} GB/s over "
                     "PCIe, and runs AdamW at {:.0f} GB/s of host memory per rank (assumed), not "
                     "beside the compute.\n",
                     a.offload_pcie_bytes_per_s / 1e9, a.offload_host_bytes_per_s / 1e9);
}

// The FP8 step's assumptions, when the plan is in fp8 (--precision fp8).
std::string fp8_text(const PlanRequest& r, const Assumptions& a) {
  if (r.precision != Precision::fp8 || !r.workload.is_transformer()) return "";
  return fmt::format("FP8 (--precision fp8): the step at the bf16 rate and utilisation, the "
                     "transformer blocks' linear-layer GEMMs at {:.2f}x that rate and their "
                     "quantisation passes (6, 6 and 4 bytes per input, weight and output-gradient "
                     "value) at {:.0f}% of the memory bandwidth (fitted to GPT-2 350M on an H200; "
                     "docs/design/fp8.md); MFU against the bf16 peak.\n",
                     a.fp8_gemm_speedup, a.fp8_cast_bandwidth_share * 100);
}

std::string calibration_text(const Calibration& cal) {
  if (cal.files.empty())
    return "Calibration: none given, so utilisation and bandwidths are datasheet-based guesses. "
           "Pass --calibration FILE.jsonl from `aiscale bench` runs to use measured figures.\n";
  std::string out = fmt::format("Calibration: {} file(s), {} utilisation and {} bandwidth "
                                "measurement(s){}.\n", cal.files.size(), cal.utilisation.size(),
                                cal.bandwidth.size(),
                                cal.copy_engine.empty()
                                    ? std::string()
                                    : fmt::format(", {} copy-engine run(s)", cal.copy_engine.size()));
  for (const auto& n : cal.notes) out += "  note: " + n + "\n";
  return out;
}

}  // namespace

std::string figure_line(const char* what, const Figure& f, const std::string& value) {
  return fmt::format("  {:<22} {:<14} {} {}\n", what, value, f.measured ? "MEASURED " : "datasheet",
                     f.source);
}

std::string figures_text(const MachineFigures& m, const std::string& label, GradTransport t) {
  std::string out = fmt::format("Figures for {} (measured ones replace datasheet guesses):\n", label);
  out += figure_line("utilisation of peak", m.utilisation,
                     fmt::format("{:.0f}% of {:.0f}", m.utilisation.value * 100, m.peak_flops / 1e12));
  if (!m.cpu_or_cnn)
    out += figure_line("GEMM half-rate size", m.gemm_half_elements,
                       fmt::format("{:.3g} elem.", m.gemm_half_elements.value));
  out += figure_line("intra-node bandwidth", m.intra_bytes_per_s,
                     fmt::format("{:.0f} GB/s", m.intra_bytes_per_s.value / 1e9));
  out += figure_line("node network bandwidth", m.node_bytes_per_s,
                     fmt::format("{:.1f} GB/s", m.node_bytes_per_s.value / 1e9));
  out += figure_line("memory bandwidth", m.hbm_bytes_per_s,
                     fmt::format("{:.2f} TB/s", m.hbm_bytes_per_s.value / 1e12));
  out += figure_line("step spread", m.step_spread, fmt::format("{:.2f}%", m.step_spread.value * 100));
  if (t == GradTransport::copy_engine)
    out += figure_line("copy-engine slowdown", m.copy_engine_slowdown,
                       fmt::format("{:.1f}%", m.copy_engine_slowdown.value * 100));
  return out;
}

std::string model_terms_text(const PlanRequest& r, const Calibration& cal, const Assumptions& a,
                             GradTransport t) {
  return calibration_text(cal) + assumptions_text(a, t) + offload_text(r, a) + fp8_text(r, a);
}

}  // namespace aiscale::plan
