// `aiscale plan scaling`: predicted strong and weak scaling of one partition over doubling
// node counts (planner.h, ScalingCurve).
#include <algorithm>

#include <fmt/format.h>

#include "aiscale/core/error.h"
#include "aiscale/plan/planner.h"

namespace aiscale::plan {
namespace {

// Per-step scaling of a curve's row against its first row (speedup × n0 / n), per GPU
// allocated as in the plan (n, n0: allocated_gpus()) and per GPU used.
void step_efficiency(Candidate& c, const Candidate& base, bool weak) {
  scale_against(c, base, weak, base.step.step_s, c.step.step_s);
  c.efficiency_used = c.scaling_used;
  c.efficiency = c.scaling;
}

// Why a run needs more nodes than the curve spans (its GPUs at fewer ranks per node than
// the node has, for host memory), or "".
std::string beyond_nodes(const Candidate& c, long limit) {
  if (c.step.nodes <= limit) return "";
  return fmt::format("{} GPUs at {} ranks per node (host memory) need {} nodes, above --max-nodes {}",
                     c.layout.gpus(), c.ranks_per_node(), c.step.nodes, limit);
}

}  // namespace

ScalingCurve scaling_curve(const PlanRequest& r, const Target& t, long max_nodes,
                           const Catalog& cat, const Calibration& cal, const Assumptions& a) {
  check_request(r);
  const Partition& part = *t.partition;
  if (!part.plannable()) fail("{}", unplannable_reason(part));
  if (part.gpus_per_node <= 0)
    fail("{}: GPUs per node are not in the catalogue, so there is no node scaling to predict (add "
         "nodes and gpus_per_node with --systems FILE)", t.label());
  if (max_nodes < 1) fail("--max-nodes must be at least 1 (got {})", max_nodes);
  ScalingCurve curve;
  curve.target = t;
  curve.figures = machine_figures(t, r.workload, r.precision, cal, cat, a);
  if (curve.figures.peak_flops <= 0) fail("{}", part.accelerator.unsupported_reason(r.precision));
  const long limit = std::min<long>(max_nodes, part.network.known() && part.nodes > 0 ? part.nodes : 1);
  const long g = part.gpus_per_node;
  std::vector<long> nodes;
  for (long n = 1; n <= limit; n *= 2) nodes.push_back(n);

  // The smallest node count with a layout that fits sets the base layout. A CNN without
  // --global-batch starts from a fixed batch per GPU, as the vision benchmark does.
  PlanRequest base_req = r;
  base_req.gpus = 0;
  if (!r.workload.is_transformer() && r.global_batch == 0) base_req.workload.default_global_batch = 0;
  std::optional<Candidate> base;
  size_t first = 0;
  std::string why;
  for (; first < nodes.size(); ++first) {
    Search s = best_layout(base_req, t, nodes[first] * g, curve.figures, a, r.include_unsupported);
    why = s.best ? beyond_nodes(*s.best, limit) : s.reason;
    if (why.empty()) {
      base = std::move(s.best);
      break;
    }
    curve.strong.push_back({nodes[first], nodes[first] * g, std::nullopt, 0, 0, why});
    curve.weak.push_back({nodes[first], nodes[first] * g, std::nullopt, 0, 0, why});
  }
  if (!base)
    fail("{} does not fit on up to {} node(s) of {}: {}", r.workload.name, limit, t.label(), why);
  curve.base = base->layout;
  curve.global_batch = base->layout.global_batch();

  // Strong scaling: the global batch stays; tensor/pipeline sizes, ZeRO stage and
  // recomputation stay as at the base; the micro-batch may shrink as copies are added.
  PlanRequest strong = r;
  strong.global_batch = curve.global_batch;
  strong.pins.tp = base->layout.tp;
  strong.pins.pp = base->layout.pp;
  strong.pins.zero = base->layout.zero;
  strong.pins.recompute = base->layout.recompute;
  std::optional<Candidate> strong0;
  for (size_t i = first; i < nodes.size(); ++i) {
    ScalingRow row{nodes[i], nodes[i] * g, std::nullopt, 0, 0, ""};
    Search s = best_layout(strong, t, row.gpus, curve.figures, a, r.include_unsupported);
    if (s.best) row.note = beyond_nodes(*s.best, limit);
    if (s.best && row.note.empty()) {
      Candidate c = std::move(*s.best);
      row.nodes = c.step.nodes;  // more than nodes[i] where fewer ranks per node fit
      if (!strong0) strong0 = c;
      step_efficiency(c, *strong0, false);
      finish_candidate(c, r, a, cat, cal);
      if (c.layout.gpus() == strong0->layout.gpus()) strong0 = c;  // the base, now finished
      epoch_efficiencies(c, *strong0);
      row.speedup = strong0->step.step_s / c.step.step_s;
      row.efficiency = c.efficiency;
      row.run = std::move(c);
    } else if (!s.best) {
      row.note = s.reason;
    }
    curve.strong.push_back(std::move(row));
  }

  // Weak scaling: micro-batch and accumulation per model copy stay; copies are added.
  std::optional<Candidate> weak0;
  for (size_t i = first; i < nodes.size(); ++i) {
    ScalingRow row{nodes[i], nodes[i] * g, std::nullopt, 0, 0, ""};
    Layout l = base->layout;
    l.dp = static_cast<int>(row.gpus / (static_cast<long>(l.tp) * l.pp));
    l.ranks_per_node = 0;  // each row places its ranks anew (below), as the plan does
    l.transport = transport_for(r, part, l, row.gpus);
    if (std::string why = transport_reason(r, part, row.gpus); !why.empty()) {
      row.note = why;
      curve.weak.push_back(std::move(row));
      continue;
    }
    Candidate c;
    c.target = t;
    c.figures = curve.figures;
    const Workload w = workload_on(r, part);
    c.attention = w.attention;
    c.engine_gap = device_gap(part.accelerator, part.is_cpu());
    if (c.engine_gap.empty()) c.engine_gap = engine_gap(w, l, r.precision, part.is_cpu());
    // The plan's host-memory rule: a rank on each GPU of a node, else fewer ranks per node
    // on more nodes where they fit.
    if (c.engine_gap.empty() && !part.is_cpu()) c.engine_gap = place_in_host_memory(r, part, w, l);
    c.layout = l;
    c.memory = memory_per_gpu(w, l, r.precision, a.memory,
                              accounting_for(c.runs(), part.is_cpu()));
    if (c.memory.total > part.accelerator.memory_bytes()) {
      row.note = "does not fit in memory";
    } else {
      c.step = estimate_step(w, l, part, curve.figures, r.precision, a,
                             accounting_for(c.runs(), part.is_cpu()));
      row.note = beyond_nodes(c, limit);
    }
    if (row.note.empty()) {
      row.nodes = c.step.nodes;
      if (!weak0) weak0 = c;
      step_efficiency(c, *weak0, true);
      finish_candidate(c, r, a, cat, cal);
      if (c.layout.gpus() == weak0->layout.gpus()) weak0 = c;  // the base, now finished
      epoch_efficiencies(c, *weak0);
      row.speedup = c.step.samples_per_s / weak0->step.samples_per_s;
      row.efficiency = c.efficiency;
      row.run = std::move(c);
    }
    curve.weak.push_back(std::move(row));
  }
  return curve;
}

}  // namespace aiscale::plan
