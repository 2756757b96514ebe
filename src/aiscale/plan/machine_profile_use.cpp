// How the planner uses a machine profile: which partitions it describes, and the figures
// it replaces (machine_profile.h).
#include <algorithm>
#include <memory>

#include <fmt/format.h>

#include "aiscale/core/error.h"
#include "aiscale/plan/machine_profile.h"

namespace aiscale::plan {

bool profile_applies(const MachineProfile& p, const Partition& part, const Catalog& cat,
                     std::string* why) {
  const Accelerator& acc = part.accelerator;
  if (acc.cpu_node) {
    const std::string id = p.is_gpu() ? std::string() : match_cpu(cat, p.cpu);
    if (!p.is_gpu() && !id.empty() && id == part.cpu_model) return true;
    if (why)
      *why = p.is_gpu()
                 ? fmt::format("it was measured on GPU '{}', and {} is a CPU partition ({})", p.gpu,
                               part.name, part.cpu_model)
                 : fmt::format("it was measured on CPU '{}' ({}), not {}'s {}", p.cpu,
                               id.empty() ? "no CPU model of the catalogue" : id, part.name,
                               part.cpu_model);
    return false;
  }
  const std::string id = p.is_gpu() ? match_device(cat, p.gpu) : std::string();
  if (p.is_gpu() && !id.empty() && id == acc.id) return true;
  if (why)
    *why = p.is_gpu()
               ? fmt::format("it was measured on GPU '{}' ({}), not {}'s {}", p.gpu,
                             id.empty() ? "no accelerator of the catalogue" : id, part.name, acc.id)
               : fmt::format("it was measured on CPU '{}' (no GPU), not {}'s {}", p.cpu, part.name,
                             acc.id);
  return false;
}

void apply_machine_profile(const MachineProfile& p, const Target& t, const Workload& w,
                           Precision precision, const Catalog& cat, MachineFigures& m) {
  const Partition& part = *t.partition;
  if (!profile_applies(p, part, cat)) return;
  const Accelerator& acc = part.accelerator;
  const std::string prec(to_string(precision));

  // A CPU node: the profile's figures used `threads` cores; the node has sockets × cores.
  int node_cores = 0;
  if (acc.cpu_node)
    if (const CpuModel* cpu = cat.find_cpu(part.cpu_model)) node_cores = part.sockets * cpu->cores;
  const double core_scale = acc.cpu_node && node_cores > 0 && p.threads > 0
                                ? double(node_cores) / p.threads : 1.0;

  // ---- utilisation: measured GEMM throughput × the step's share of it, over the peak ----
  if (!m.utilisation.measured && w.is_transformer() && m.peak_flops > 0) {
    double gemm = 0;
    double at_elements = 0;  // the sweep's peak holds for large GEMMs, as the datasheet's
    std::string what;
    if (auto it = p.gemm_model_tflops.find(prec);
        it != p.gemm_model_tflops.end() && p.shapes_model == w.name) {
      gemm = it->second;
      // The GEMM-size curve (utilisation_at) scales from the shape this figure holds at.
      at_elements = double(p.shapes_batch) * double(p.shapes_seq) * double(w.gpt.n_embd);
      what = fmt::format("{} GEMMs at {}'s shapes ({} x {} tokens)", prec, p.shapes_model,
                         p.shapes_batch, p.shapes_seq);
    } else if (auto pk = p.gemm_peak_tflops.find(prec); pk != p.gemm_peak_tflops.end()) {
      gemm = pk->second;
      what = fmt::format("{} GEMM peak of the size sweep", prec);
    }
    if (gemm > 0) {
      const double rate = gemm * 1e12 * core_scale * kStepShareOfGemm;
      const double u = std::min(1.0, rate / m.peak_flops);
      m.utilisation_at_elements = at_elements;
      m.utilisation = {
          u, true,
          fmt::format("{}: {} {:.1f} TFLOP/s{} x {:.0f}% assumed step share of GEMM throughput",
                      p.label(), what, gemm,
                      core_scale != 1.0 ? fmt::format(" on {} thread(s), scaled to the node's {} "
                                                      "cores", p.threads, node_cores)
                                        : std::string(),
                      kStepShareOfGemm * 100)};
    }
  }

  // ---- intra-node link: the all-reduce's bus bandwidth, else the slowest P2P pair ------
  if (!m.intra_bytes_per_s.measured && !acc.cpu_node) {
    if (p.allreduce_ranks > 1 && p.nodes == 1 && p.is_gpu()) {
      m.intra_bytes_per_s = {p.allreduce_busbw_gbs * 1e9, true,
                             fmt::format("{}: {} all-reduce bus bandwidth, {} ranks, {:.0f} MiB",
                                         p.label(), p.allreduce_backend, p.allreduce_ranks,
                                         p.allreduce_bytes / (1024.0 * 1024.0))};
    } else if (!p.peers.empty()) {
      m.intra_bytes_per_s = {p.p2p_min_gbs() * 1e9, true,
                             fmt::format("{}: slowest peer-to-peer pair of {} GPUs{}", p.label(),
                                         p.gpu_count,
                                         p.p2p_enabled ? "" : " (peer access not enabled on every pair)")};
    }
  }

  // ---- memory bandwidth: the device's triad, or the host's on a CPU node ---------------
  if (!m.hbm_bytes_per_s.measured) {
    if (!acc.cpu_node && p.device_triad_gbs > 0) {
      m.hbm_bytes_per_s = {p.device_triad_gbs * 1e9, true,
                           fmt::format("{}: device triad", p.label())};
    } else if (acc.cpu_node && p.host_triad_gbs > 0 && core_scale <= 1.0) {
      // A triad over fewer cores than the node has says little about the node's DRAM.
      m.hbm_bytes_per_s = {p.host_triad_gbs * 1e9, true,
                           fmt::format("{}: host triad over {} threads", p.label(), p.threads)};
    }
  }
}

std::vector<std::string> attach_machine_profile(const std::string& path, const Catalog& cat,
                                                const std::vector<Target>& targets,
                                                Calibration& cal) {
  auto p = std::make_shared<MachineProfile>(load_machine_profile(path));
  std::vector<std::string> warnings;
  std::vector<std::string> used;
  for (const Target& t : targets) {
    std::string why;
    if (profile_applies(*p, *t.partition, cat, &why)) {
      used.push_back(t.label());
      continue;
    }
    warnings.push_back(fmt::format("{} not used for {}: {}; its figures fit only that device "
                                   "(plan that system, or measure this one with `aiscale bench "
                                   "machine`)", p->label(), t.label(), why));
  }
  std::string list;
  for (const auto& u : used) list += (list.empty() ? "" : ", ") + u;
  cal.files.push_back(path);
  cal.notes.push_back(used.empty()
                          ? fmt::format("{} ({}) describes none of the planned partitions",
                                        p->label(), p->device())
                          : fmt::format("{} ({}) replaces datasheet figures for {}", p->label(),
                                        p->device(), list));
  for (const auto& w : warnings) cal.notes.push_back("warning: " + w);
  cal.machine_profile = std::move(p);
  return warnings;
}

}  // namespace aiscale::plan
