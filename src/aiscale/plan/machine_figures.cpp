// The figures one partition runs at for a workload (calibration.h, MachineFigures): the
// datasheet peak and bandwidths with assumed efficiencies, replaced figure by figure by
// what the calibration's measured runs show (utilisation and its GEMM-size curve, bus
// bandwidths, step spread, the copy-engine slowdown), then by a machine profile's. Kept
// apart from calibration.cpp, which reads the result files into those measurements.
#include "aiscale/plan/calibration.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "aiscale/plan/collectives.h"
#include "aiscale/plan/machine_profile.h"
#include "aiscale/plan/perf.h"

namespace aiscale::plan {

std::optional<GemmCurve> fit_gemm_curve(const Calibration& cal, std::string_view accelerator_id,
                                        Precision p, std::string_view family) {
  std::vector<const MfuSample*> pts;
  for (const auto& s : cal.utilisation)
    if (s.accelerator_id == accelerator_id && s.precision == p && s.world_size == 1 &&
        !s.cnn && s.family == family && s.gemm_elements > 0 && s.utilisation > 0)
      pts.push_back(&s);
  if (pts.size() < 2) return std::nullopt;
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  double lo = pts.front()->gemm_elements, hi = lo;
  for (const MfuSample* s : pts) {
    const double x = 1.0 / s->gemm_elements, y = 1.0 / s->utilisation;
    sx += x, sy += y, sxx += x * x, sxy += x * y;
    lo = std::min(lo, s->gemm_elements), hi = std::max(hi, s->gemm_elements);
  }
  const double n = static_cast<double>(pts.size());
  const double den = n * sxx - sx * sx;
  if (hi <= lo * 1.01 || !(std::fabs(den) > 0)) return std::nullopt;  // one shape only
  const double slope = (n * sxy - sx * sy) / den, intercept = (sy - slope * sx) / n;
  if (!(intercept > 0) || !(slope > 0)) return std::nullopt;
  GemmCurve c;
  c.u_max = std::min(1.0, 1.0 / intercept);
  c.half_elements = slope / intercept;
  c.samples = static_cast<int>(pts.size());
  c.sources = fmt::format("{} 1-GPU runs from {} to {} elements per layer activation, first at {}",
                          pts.size(), lo, hi, pts.front()->source);
  return c;
}

namespace {

// The median spread of the one-device runs on this accelerator and precision that report
// one (step_time_p90_s), else the assumption for GPUs or CPU nodes.
Figure step_spread_figure(const Calibration& cal, const std::string& accelerator_id, Precision p,
                          bool cpu, const Assumptions& a) {
  // GPUs: the stated figure, itself the median of a 22-run sweep. One GPU run's p90 mostly
  // catches rare host hiccups (the 1-GPU copy-engine run's p90 lay 10% above its median
  // while the sweep's lie 0.1-0.6% above), not the steady per-step skew between ranks the
  // term prices. CPU ranks: their measured spread (OS noise, shared caches and memory).
  std::vector<const MfuSample*> runs;
  for (const auto& s : cal.utilisation)
    if (cpu && s.accelerator_id == accelerator_id && s.precision == p && s.world_size == 1 &&
        s.step_spread > 0)
      runs.push_back(&s);
  if (runs.empty())
    return {cpu ? a.step_spread_cpu : a.step_spread_gpu, false,
            cpu ? fmt::format("assumed {:.1f}% on a dedicated node (no CPU calibration run gives a p90)",
                              a.step_spread_cpu * 100)
                : fmt::format("{:.2f}%: the median of (p90 − median) / 1.28 over aiscale's 1-GPU "
                              "H100 sweep (stated in the assumptions)", a.step_spread_gpu * 100)};
  std::sort(runs.begin(), runs.end(),
            [](const MfuSample* x, const MfuSample* y) { return x->step_spread < y->step_spread; });
  const MfuSample* mid = runs[runs.size() / 2];
  return {mid->step_spread, true,
          runs.size() == 1
              ? fmt::format("(p90 − median) / 1.28 of the one-device step at {}", mid->source)
              : fmt::format("median over {} one-device runs of (p90 − median) / 1.28, at {}",
                            runs.size(), mid->source)};
}

}  // namespace

double utilisation_at(const MachineFigures& m, double elements, const Assumptions& a) {
  const double h = m.gemm_half_elements.value > 0 ? m.gemm_half_elements.value : a.gemm_half_elements;
  if (m.cpu_or_cnn || !(elements > 0) || !(h > 0)) return m.utilisation.value;
  auto curve = [&](double x) { return x / (x + h); };
  const double ref = m.utilisation_at_elements > 0 ? curve(m.utilisation_at_elements) : 1.0;
  return m.utilisation.value * curve(elements) / ref;
}

MachineFigures machine_figures(const Target& t, const Workload& w, Precision p,
                               const Calibration& cal, const Catalog& cat, const Assumptions& a) {
  const Partition& part = *t.partition;
  const Accelerator& acc = part.accelerator;
  MachineFigures m;
  m.peak_flops = acc.peak_flops(p);
  m.cpu_or_cnn = acc.cpu_node || !w.is_transformer();
  // FP8 training runs a transformer's step in bf16 but for its linear layers' GEMMs
  // (perf.cpp: Assumptions::fp8_*): the bf16 peak and bf16's utilisation, where the
  // accelerator has FP8 tensor cores at all (else peak 0: refused, naming the reason).
  if (p == Precision::fp8 && w.is_transformer() && !acc.cpu_node) {
    m.peak_flops = acc.peak_fp8 > 0 ? acc.peak_flops(Precision::bf16) : 0.0;
    p = Precision::bf16;
  }

  const double default_u = acc.cpu_node            ? a.cpu_utilisation
                           : w.is_transformer()     ? a.transformer_utilisation
                           : is_mixed(p)            ? a.cnn_utilisation
                                                    : a.cnn_utilisation_fp32;
  m.utilisation = {default_u, false,
                   acc.cpu_node
                       ? fmt::format("assumed {:.0f}% of the node's {} peak (cores × clock × FLOPs "
                                     "per cycle), as aiscale's measured CPU training step reached "
                                     "on 2 EPYC cores", default_u * 100, to_string(p))
                       : fmt::format("assumed {:.0f}% of the dense {} datasheet peak",
                                     default_u * 100, to_string(p))};
  m.gemm_half_elements = {a.gemm_half_elements, false,
                          "assumed: half a wave of 128 × 128 output tiles on 132 SMs"};
  if (w.is_transformer() && !acc.cpu_node)
    if (const auto fit = fit_gemm_curve(cal, acc.id, p, nn::to_string(w.gpt.family))) {
      // A measured sweep over micro-batch and width: the curve itself is measured.
      m.utilisation = {fit->u_max, true,
                       fmt::format("fitted to {}: {:.1f}% at large GEMMs", fit->sources, fit->u_max * 100)};
      m.utilisation_at_elements = 0;
      m.gemm_half_elements = {fit->half_elements, true,
                              fmt::format("fitted to {}", fit->sources)};
    }
  if (!acc.cpu_node && !m.gemm_half_elements.measured)
    if (const MfuSample* s = cal.closest_utilisation(acc.id, p, w.params(), !w.is_transformer(),
                                                      w.is_transformer() ? nn::to_string(w.gpt.family) : "")) {
      m.utilisation_at_elements = s->gemm_elements;
      m.utilisation = {s->utilisation, true,
                       fmt::format("{} on {} ({} params): {:.1f} TFLOP/s at {}{}{}", s->model,
                                   s->device, s->n_params, s->achieved_tflops, s->source,
                                   s->optimizer_s > 0
                                       ? fmt::format(" (step without the {:.2f} ms AdamW estimate)",
                                                     s->optimizer_s * 1e3)
                                       : std::string(),
                                   s->world_size > 1
                                       ? fmt::format("; a {}-GPU run, whose step also holds its "
                                                     "communication (no 1-GPU run given)",
                                                     s->world_size)
                                       : std::string())};
    }
  if (w.is_transformer() && acc.cpu_node && p == Precision::fp32)
    if (const CpuModel* cpu = cat.find_cpu(part.cpu_model)) {
      const int cores = part.sockets * cpu->cores;
      if (const MfuSample* s = cal.closest_cpu_utilisation(cpu->id, cores, w.params()))
        m.utilisation = {s->utilisation, true,
                         fmt::format("{} on {} ({} params, {} thread(s)): {:.1f} GFLOP/s per rank at "
                                     "{}; a node of {} cores assumed to keep that utilisation per core",
                                     s->model, s->device, s->n_params, s->threads,
                                     s->achieved_tflops * 1e3, s->source, cores)};
    }

  const double intra_datasheet = part.intra.gbytes_per_s * 1e9;
  m.intra_bytes_per_s = {intra_datasheet * a.intra_efficiency, false,
                         acc.cpu_node ? std::string("one rank per CPU node: no intra-node collectives")
                         : part.intra.gbytes_per_s > 0
                             ? fmt::format("{} {:.0f} GB/s per direction{} × {:.0f}% assumed efficiency",
                                           part.intra.link, part.intra.gbytes_per_s,
                                           part.intra.assumed ? " (link assumed)" : "",
                                           a.intra_efficiency * 100)
                             : std::string("intra-node link not in the catalogue")};
  if (const BusSample* s = cal.intra_node(acc.id, t.system->id))
    m.intra_bytes_per_s = {s->busbw_bytes_per_s, true,
                           fmt::format("{} all-reduce bus bandwidth, {} ranks, {:.0f} MiB, at {}",
                                       s->backend.empty() ? "ring" : s->backend, s->world_size,
                                       s->bytes / (1024.0 * 1024.0), s->source)};

  const Network& net = part.network;
  m.node_bytes_per_s = {net.known() ? net.node_bytes_per_s() * a.inter_efficiency : 0.0, false,
                        net.known() ? fmt::format("{}× {} {:.0f} Gb/s × {:.0f}% assumed efficiency",
                                                  net.links, net.kind, net.gbps_per_link,
                                                  a.inter_efficiency * 100)
                                    : std::string("network not in the catalogue (one node only)")};
  if (const BusSample* s = cal.inter_node(t.system->id))
    m.node_bytes_per_s = {s->busbw_bytes_per_s, true,
                          fmt::format("all-reduce bus bandwidth over {} nodes at {}",
                                      s->nodes, s->source)};

  std::string hbm_src;
  const double hbm = cat.memory_bandwidth_tbs(acc, &hbm_src);
  if (acc.cpu_node) hbm_src = acc.id + " DRAM channels × rate (datasheet)";
  m.hbm_bytes_per_s = {hbm * 1e12, false, hbm > 0 ? hbm_src : "unknown"};

  m.step_spread = step_spread_figure(cal, acc.cpu_node ? "cpu:" + part.cpu_model : acc.id, p,
                                     acc.cpu_node, a);
  m.copy_engine_slowdown = {a.copy_engine_slowdown, false,
                            fmt::format("assumed {:.1f}%, as measured on NVLink H200s",
                                        a.copy_engine_slowdown * 100)};
  if (const CopyEngineSample* s = cal.closest_copy_engine(acc.id, w.params())) {
    // step(n) = (step(1) - AdamW) (1 + slowdown) + last bucket + AdamW, with the model's
    // own AdamW and last-bucket estimates for the measured model and GPU count.
    const double adamw = hbm > 0 ? s->n_params * a.adamw_bytes_touched / (hbm * 1e12) : 0.0;
    const double bucket = std::min(s->n_params * a.grad_comm_bytes, a.bucket_bytes);
    const double tail = ring_allreduce_time(
        bucket, s->world_size, {a.alpha_intra_s, m.intra_bytes_per_s.value});
    const double compute = s->baseline_s - adamw;
    // The model's own wait for the slower rank (perf.cpp, straggler_s), as for a prediction.
    const double straggler = m.step_spread.value * s->baseline_s * expected_max_normal(s->world_size);
    if (compute > 0) {
      const double slowdown =
          std::clamp((s->step_s - s->baseline_s - tail - straggler) / compute, 0.0, 0.5);
      m.copy_engine_slowdown = {
          slowdown, true,
          fmt::format("{} GPUs over the copy engines, {} params: {:.2f} ms against {:.2f} ms on "
                      "one, less the {:.2f} ms last bucket and {:.2f} ms waiting for the slower rank, "
                      "over the {:.2f} ms without AdamW, at {}",
                      s->world_size, s->n_params, s->step_s * 1e3, s->baseline_s * 1e3,
                      tail * 1e3, straggler * 1e3, compute * 1e3, s->source)};
    }
  }
  if (cal.machine_profile) apply_machine_profile(*cal.machine_profile, t, w, p, cat, m);
  return m;
}

}  // namespace aiscale::plan
