// Text output of `aiscale plan`: tables people read.
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "aiscale/core/split.h"
#include "aiscale/plan/report.h"
#include "aiscale/plan/report_explain.h"
#include "aiscale/plan/units.h"

namespace aiscale::plan {
namespace {

size_t display_width(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s)
    if ((c & 0xC0) != 0x80) ++n;  // count UTF-8 lead bytes only
  return n;
}

std::string pad(const std::string& s, size_t width, bool right) {
  const size_t w = display_width(s);
  if (w >= width) return s;
  return right ? std::string(width - w, ' ') + s : s + std::string(width - w, ' ');
}

std::string pct(double x) { return fmt::format("{:.0f}%", x * 100.0); }

std::string network_text(const Partition& p) {
  if (!p.network.known()) return "-";
  return fmt::format("{}× {} {:.0f} Gb/s", p.network.links, p.network.kind, p.network.gbps_per_link);
}

std::string attention_note(const Candidate& c, const Workload& w) {
  if (!w.is_transformer()) return "";
  return c.attention == Attention::flash ? " (flash attention: no score matrices)"
                                         : " (materialized attention scores)";
}

std::string memory_detail(const MemoryBreakdown& m, const Accelerator& acc, const std::string& att) {
  return fmt::format(
      "  memory per {} ({} stage): weights {} + gradients {} + optimizer {} + activations {}{}{} + "
      "workspace {} = {} of {}{}\n",
      acc.cpu_node ? "node" : "GPU", m.stage, gib(m.weights, 2), gib(m.gradients, 2), gib(m.optimizer, 2), gib(m.activations, 2), att,
      m.buffers > 0 ? " + buffers " + gib(m.buffers, 2) : std::string(), gib(m.workspace, 2),
      gib(m.total, 2), gib(acc.memory_bytes(), 0),
      m.offloaded > 0 ? "; optimizer state offloaded to host memory: " + gib(m.offloaded, 2) + " per rank"
                      : std::string());
}

std::string step_detail(const StepEstimate& s) {
  return fmt::format(
      "  step time: compute {} + tensor-parallel comm {} + pipeline bubble {} + pipeline sends "
      "{} + exposed data-parallel comm {} (of {}) + collectives beside compute {} + "
      "synchronisation {} + stragglers {} + optimizer {} = {}; MFU {:.0f}%\n",
      duration(s.compute_s), duration(s.tp_comm_s), duration(s.bubble_s), duration(s.pp_comm_s),
      duration(s.dp_exposed_s), duration(s.dp_comm_s), duration(s.overlap_cost_s), duration(s.sync_s),
      duration(s.straggler_s),
      duration(s.optimizer_s), duration(s.step_s),
      s.mfu * 100);
}

// One epoch's figures (epoch.h) and the three efficiencies against the base GPU count.
std::string epoch_detail(const Candidate& c, const EpochInputs& in) {
  const EpochEstimate& e = c.epoch;
  std::string out = fmt::format(
      "  epoch: {} samples in {} steps × {}{} = {}; loading {} per step (read {}, decode {}), "
      "not hidden {} (first batch {}); validation {} samples in {} forward-only batches {}; "
      "start-up's share {}; epoch {}; {:.3g} epoch(s)\n",
      with_commas(static_cast<int64_t>(std::llround(e.samples))),
      with_commas(static_cast<int64_t>(e.steps)), duration(c.step.step_s),
      e.last_fraction < 1 ? fmt::format(" (last batch {:.0f}% full, costs a whole step: +{})",
                                        e.last_fraction * 100, duration(e.last_batch_s))
                          : std::string(),
      duration(e.train_steps_s), duration(e.load_per_step_s), duration(e.read_per_step_s),
      in.decoded ? duration(e.decode_per_step_s) : std::string("none"), duration(e.load_exposed_s),
      duration(e.first_batch_s), with_commas(static_cast<int64_t>(std::llround(in.validation_samples))),
      with_commas(static_cast<int64_t>(e.validation_batches)), duration(e.validation_s),
      duration(e.startup_s), duration(e.epoch_s), c.epochs);
  out += fmt::format("  efficiency against {} GPU{}{} (samples per second per GPU allocated): per batch "
                     "{:.0f}%, per training part {:.0f}%, per epoch {:.0f}%\n", c.base_gpus,
                     c.base_gpus == 1 ? "" : "s",
                     c.base_allocated_gpus != c.base_gpus
                         ? fmt::format(", {} allocated", c.base_allocated_gpus) : std::string(),
                     c.eff_batch * 100, c.eff_train * 100, c.eff_epoch * 100);
  out += "  dataset: " + in.source + "\n";
  out += figure_line("filesystem read", e.figures.storage_bytes_per_s,
                     fmt::format("{:.1f} GB/s", e.figures.storage_bytes_per_s.value / 1e9));
  if (in.decoded) {
    out += figure_line("decoding per core", e.figures.decode_per_core,
                       fmt::format("{:.0f} img/s", e.figures.decode_per_core.value));
    out += figure_line("loader cores per GPU", e.figures.cores_per_gpu,
                       fmt::format("{:.0f}", e.figures.cores_per_gpu.value));
  }
  return out;
}

std::string workload_text(const PlanRequest& r, const PlanResult* res) {
  // res == nullptr: a scaling curve, where the amount of training data does not matter.
  const Workload& w = r.workload;
  std::string out = fmt::format("Workload: {} — {}\n", w.name, w.describe());
  if (!w.origin.empty()) out += fmt::format("  shape from     {}\n", w.origin);
  out += fmt::format("  parameters     N = {} (exact{})\n", with_commas(w.params()),
                     !w.is_transformer() ? ""
                     : w.gpt.tied()      ? "; tied embedding counted once"
                                         : "; the untied LM head counted beside the embedding");
  if (res && w.is_transformer()) {
    const long gb = r.global_batch > 0 ? r.global_batch : w.default_global_batch;
    out += fmt::format("  training data  D = {} tokens; global batch {} sequences × {} = {} tokens "
                       "per step, {} steps\n", sci(r.tokens), gb, w.seq_len,
                       with_commas(gb * w.seq_len),
                       with_commas(static_cast<int64_t>(std::ceil(r.tokens / (double(gb) * w.seq_len)))));
  } else if (res) {
    out += fmt::format("  training data  {} images × {} epochs; {} multiply-adds per image "
                       "forward\n", with_commas(static_cast<int64_t>(r.images)), r.epochs,
                       sci(w.cnn.macs_per_sample));
    const long gb = r.global_batch > 0 ? r.global_batch : w.default_global_batch;
    out += gb > 0 ? fmt::format("  global batch   {} images per step (strong scaling), {} steps\n", gb,
                                with_commas(static_cast<int64_t>(std::ceil(r.images * r.epochs / gb))))
                  : std::string("  batch          fixed per GPU, the largest that fits of 8..256 (weak scaling)\n");
  }
  if (res)
    out += fmt::format("  compute        {} = {}\n", res->compute.formula, res->compute.substituted);
  if (w.is_transformer())
    out += r.attention
               ? fmt::format("  attention      {} (--attention){}\n", to_string(*r.attention),
                             *r.attention == Attention::flash
                                 ? ": fused kernel, activations keep no (B, heads, T, T) scores"
                                 : ": the (B, heads, T, T) scores are stored for backward")
               : std::string("  attention      flash on GPU partitions (fused: aiscale's CUDA backend, "
                             "PyTorch SDPA; no score matrices stored), materialized on CPU "
                             "partitions (aiscale's CPU backend stores them); --attention to "
                             "choose\n");
  const StateBytes sb = state_bytes(w.optimizer, r.precision);
  out += fmt::format("  precision      {}: {} + {} + {} = {} bytes of model state per parameter "
                     "(weights + gradients + {}) before sharding\n", to_string(r.precision),
                     sb.weights, sb.gradients, sb.optimizer, sb.total(),
                     w.optimizer == Optimizer::adamw ? "AdamW state" : "SGD momentum");
  return out;
}

}  // namespace

std::string text_table(const std::vector<std::vector<std::string>>& rows, size_t left_columns) {
  std::vector<size_t> widths;
  for (const auto& row : rows)
    for (size_t i = 0; i < row.size(); ++i) {
      if (widths.size() <= i) widths.push_back(0);
      widths[i] = std::max(widths[i], display_width(row[i]));
    }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      if (i) line += "  ";
      line += pad(row[i], widths[i], i >= left_columns);
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  return out;
}

std::string systems_text(const Catalog& cat) {
  std::string out = fmt::format("Systems catalogue ({} systems, {} accelerators; files: {})\n\n",
                                cat.systems.size(), cat.accelerators.size(),
                                cat.files.empty() ? "-" : cat.files.front().substr(0, cat.files.front().rfind('/')));
  std::vector<std::vector<std::string>> rows = {{"system/partition", "kind", "EuroHPC", "accelerator",
                                                 "nodes", "GPUs/node", "GPU memory", "RAM/node",
                                                 "intra-node", "network", "topology"}};
  for (const auto& s : cat.systems) {
    if (s.partitions.empty())
      rows.push_back({s.id, s.status, s.eurohpc ? "yes" : "no", "-", "-", "-", "-", "-", "-", "-", "-"});
    for (const auto& p : s.partitions)
      rows.push_back({s.id + "/" + p.id, p.kind, s.eurohpc ? "yes" : "no",
                      p.accelerator.id.empty() ? "-" : p.accelerator.id,
                      p.nodes > 0 ? std::to_string(p.nodes) : "?",
                      p.kind == "gpu" ? (p.gpus_per_node > 0 ? std::to_string(p.gpus_per_node) : "?") : "-",
                      p.accelerator.id.empty() || p.accelerator.cpu_node
                          ? "-" : fmt::format("{:.0f} GiB", p.accelerator.memory_gib),
                      p.ram_gib > 0 ? fmt::format("{:.0f} GiB", p.ram_gib) : "-",
                      p.intra.gbytes_per_s > 0 ? fmt::format("{} {:.0f} GB/s{}", p.intra.link,
                                                             p.intra.gbytes_per_s, p.intra.assumed ? "*" : "")
                                               : "-",
                      network_text(p), std::string(to_string(p.network.topology))});
  }
  out += text_table(rows, 4);
  out += "\n  ? = not in the catalogue's sources (planned as one GPU / one node).  * = link "
         "assumed from the GPU's datasheet (site does not state it).\n  intra-node: per GPU, one "
         "direction.\n\n";

  std::vector<std::vector<std::string>> acc = {{"accelerator", "vendor", "memory", "HBM TB/s",
                                                "FP64", "FP32", "TF32", "FP16", "BF16", "FP8"}};
  auto tf = [](double x) { return x > 0 ? fmt::format("{:g}", x) : std::string("-"); };
  for (const auto& a : cat.accelerators)
    acc.push_back({a.id, a.vendor, fmt::format("{:g} GiB", a.memory_gib),
                   a.memory_bandwidth_tbs > 0 ? fmt::format("{:g}", a.memory_bandwidth_tbs)
                                              : "(as " + a.bandwidth_as + ")",
                   tf(a.peak_fp64), tf(a.peak_fp32), tf(a.peak_tf32), tf(a.peak_fp16),
                   tf(a.peak_bf16), tf(a.peak_fp8)});
  out += "Accelerators: dense datasheet peaks in TFLOP/s (no sparsity)\n";
  out += text_table(acc, 2);
  std::vector<std::vector<std::string>> cpus = {{"cpu", "vendor", "cores", "GHz", "FP32 FLOP/cycle",
                                                 "FP64 FLOP/cycle", "FP32 GFLOP/s", "DRAM GB/s"}};
  for (const auto& c : cat.cpus)
    cpus.push_back({c.id, c.vendor, std::to_string(c.cores), fmt::format("{:g}", c.ghz),
                    fmt::format("{:g}", c.fp32_flops_per_cycle), fmt::format("{:g}", c.fp64_flops_per_cycle),
                    fmt::format("{:.0f}", c.cores * c.ghz * c.fp32_flops_per_cycle),
                    fmt::format("{:g}", c.memory_bandwidth_gbs)});
  if (!cat.cpus.empty()) {
    out += "\nCPU models (per socket; CPU partitions are planned one rank per node, accelerator "
           "\"N× model\" above)\n";
    out += text_table(cpus, 2);
  }
  return out;
}

namespace {

std::string zero_short(const Layout& l) { return l.zero == 0 ? "" : fmt::format(" Z{}", l.zero); }

// "64×1×1 Z1 8×1": dp×tp×pp, ZeRO stage, micro-batch × accumulation (+ " rc" with
// recomputation, " ce" over the copy engines, " off" with the optimizer offloaded).
std::string layout_short(const Layout& l) {
  return fmt::format("{}{} {}×{}{}{}{}", l.shape(), zero_short(l), l.micro_batch, l.grad_accum,
                     l.recompute == Recompute::none ? "" : l.recompute == Recompute::full ? " rc-full" : " rc-sel",
                     l.transport == GradTransport::copy_engine ? " ce" : "", l.offload ? " off" : "");
}

std::string objective_text(const PlanRequest& r, const Assumptions& a) {
  switch (r.objective) {
    case Objective::time: return "time to finish";
    case Objective::gpu_hours: return "GPU-hours";
    case Objective::energy:
      return fmt::format("the GPUs' energy at their datasheet board power (allocated GPUs without a "
                         "rank at {:.0f}% of it)", a.idle_power_fraction * 100);
    case Objective::cost: return "cost (GPU-hours x --price)";
    case Objective::smallest: return fmt::format("the smallest allocation that finishes within {}",
                                                 duration(r.deadline_s.value_or(0)));
  }
  return "";
}

// Lines longer than `width` display columns broken at spaces, continued under their own
// indentation + 4 (table lines are narrower and pass through).
std::string wrap_lines(const std::string& text, size_t width) {
  std::string out;
  const std::vector<std::string_view> lines = split(text, '\n');
  for (size_t i = 0; i < lines.size(); ++i) {
    std::string line(lines[i]);
    const size_t indent = line.find_first_not_of(' ') == std::string::npos ? 0 : line.find_first_not_of(' ');
    bool first = true;
    while (display_width(line) > width) {
      // the last space that keeps the head within width (by bytes: close enough for ASCII text)
      size_t cut = line.rfind(' ', width);
      if (cut == std::string::npos || cut <= indent + 4) cut = line.find(' ', width);
      if (cut == std::string::npos) break;
      out += line.substr(0, cut) + "\n";
      line = std::string(indent + 4, ' ') + line.substr(cut + 1);
      first = false;
    }
    (void)first;
    out += line;
    if (i + 1 < lines.size() || text.ends_with('\n')) out += "\n";
  }
  return out;
}

// " × 2/4" (`lead` then ranks per node / the node's GPUs) where the plan places fewer ranks
// on a node than it has GPUs, else "".
std::string fewer_ranks(const Candidate& c, std::string_view lead) {
  if (c.layout.ranks_per_node <= 0) return "";
  return fmt::format("{}{}/{}", lead, c.layout.ranks_per_node, c.target.partition->gpus_per_node);
}

std::string best_detail(const PlanRequest& r, const PlanResult& res, const Candidate& best,
                        bool explain) {
  const Workload& w = r.workload;
  const bool cpu = best.target.partition->is_cpu();
  const char* hours = cpu ? "node-hours" : "GPU-hours";
  const std::string devices = cpu ? fmt::format("{} CPU node{}", best.step.nodes, best.step.nodes == 1 ? "" : "s")
                                  : fmt::format("{} GPU{}", best.layout.gpus(), best.layout.gpus() == 1 ? "" : "s");
  std::string out = fmt::format("{}: {} on {}{}, {}\n", best.runs() ? "Best" : "Best, not runnable today",
                                best.target.label(), devices,
                                cpu ? "" : fmt::format(" ({} node{}{})", best.step.nodes, best.step.nodes == 1 ? "" : "s",
                                                       fewer_ranks(best, ", ranks per node ")),
                                best.layout.describe());
  if (!best.runs()) out += fmt::format("  `aiscale train` cannot run it yet: {}\n", best.engine_gap);
  if (explain) {
    out += memory_detail(best.memory, best.target.partition->accelerator, attention_note(best, w));
    out += step_detail(best.step);
    out += fmt::format("  utilisation at this layout's GEMM size: {:.1f}% of the peak\n",
                       best.step.utilisation * 100);
  }
  out += fmt::format("  time to finish: {} steps × {} + start-up {}{} = {} on {} = {} {}\n",
                     with_commas(static_cast<int64_t>(std::ceil(best.steps))), duration(best.step.step_s),
                     duration(best.startup_s),
                     best.epoch.load_exposed_s + best.epoch.validation_s > 0
                         ? fmt::format(" + loading and validation {}",
                                       duration(best.epochs * (best.epoch.load_exposed_s + best.epoch.validation_s)))
                         : std::string(),
                     duration(best.days * 86400.0),
                     best.layout.ranks_per_node > 0
                         ? fmt::format("the {} GPUs of its {} nodes", best.allocated_gpus(), best.step.nodes)
                         : devices,
                     with_commas(static_cast<int64_t>(std::llround(best.gpu_hours))), hours);
  if (explain) out += epoch_detail(best, epoch_inputs(r));
  // Where nodes keep GPUs idle (fewer ranks per node), the efficiencies count the GPUs
  // allocated; the figure over the GPUs used follows.
  const bool idle = best.allocated_gpus() != best.layout.gpus();
  out += fmt::format("  efficiency {:.0f}%: one {} running the same {} samples per step at its best "
                     "micro-batch, without communication, would take {} per step ({} here × {}{}){}{}\n",
                     best.efficiency * 100, cpu ? "node" : "GPU", best.step.samples_per_step,
                     duration(best.ideal_step_s), duration(best.step.step_s), best.allocated_gpus(),
                     idle ? " GPUs allocated" : "",
                     idle ? fmt::format("; {:.0f}% over the {} GPUs used", best.efficiency_used * 100,
                                        best.layout.gpus())
                          : std::string(),
                     best.efficiency_note.empty() ? "" : "; " + best.efficiency_note);
  const bool base_idle = best.base_allocated_gpus != best.base_gpus;
  out += fmt::format("  scaling {:.0f}%{} against the fewest GPUs it fits on ({}{}), start-up included: "
                     "the figure --min-efficiency bounds\n", best.scaling * 100,
                     idle || base_idle
                         ? fmt::format(" per GPU allocated ({:.0f}% per GPU used)", best.scaling_used * 100)
                         : std::string(),
                     best.base_gpus,
                     base_idle ? fmt::format(", {} allocated", best.base_allocated_gpus) : std::string());
  out += fmt::format("  access: {}: {}\n", best.route.name, best.route.detail);
  if (!best.route.also.empty()) {
    std::string also;
    for (const auto& x : best.route.also) also += (also.empty() ? "" : "; ") + x;
    out += fmt::format("    EuroHPC JU calls that also fit: {}\n", also);
  }
  if (!explain) return out;
  const GpuHours ideal = ideal_gpu_hours(res.compute.flops, best.figures.peak_flops,
                                         best.figures.utilisation.value);
  std::string alone = ideal.substituted;
  if (cpu && alone.size() > 9 && alone.compare(alone.size() - 9, 9, "GPU-hours") == 0)
    alone.replace(alone.size() - 9, 9, "node-hours");
  out += fmt::format("  compute alone: {}\n", alone);
  return out;
}

}  // namespace

std::string plan_text(const PlanRequest& r, const PlanResult& res, const Calibration& cal,
                      const Assumptions& a, bool explain) {
  const Workload& w = r.workload;
  std::string out = explain ? workload_text(r, &res) + "\n"
                            : fmt::format("{}: {} parameters, {}\n", w.name, compact(static_cast<double>(w.params())),
                                          w.is_transformer() ? fmt::format("{} tokens", sci(r.tokens))
                                                             : fmt::format("{} images × {} epochs",
                                                                           compact(r.images), r.epochs));
  const bool weak = (r.global_batch > 0 ? r.global_batch : w.default_global_batch) == 0;
  out += fmt::format("Ranked by {}{}; at most the GPUs that keep {}-scaling efficiency (per GPU allocated) "
                     "≥ {:.0f}%{}{}\n",
                     objective_text(r, a), r.gpus > 0 ? fmt::format(" at {} GPUs", r.gpus) : "",
                     weak ? "weak" : "strong", r.min_efficiency * 100,
                     r.objective == Objective::time
                         ? fmt::format(", no more once a run is under {}", duration(r.min_duration_s)) : "",
                     r.deadline_s && r.objective != Objective::smallest
                         ? fmt::format("; deadline {}", duration(*r.deadline_s)) : "");
  const bool marks = r.include_unsupported;
  std::vector<std::string> head = {"#", "system/partition", "GPUs", "layout", "mem GiB", "step",
                                   "eff", "time", "GPU-h", "route"};
  const bool energy = r.objective == Objective::energy;
  if (energy) head.insert(head.end() - 1, "kWh");
  const bool cost = !r.prices.empty();
  if (cost) head.insert(head.end() - 1, "cost");
  if (marks) head.push_back("runs");
  std::vector<std::vector<std::string>> rows = {head};
  std::string gaps;
  int i = 0;
  for (const auto& c : res.ranked) {
    ++i;
    const bool one_gpu = c.target.partition->gpus_per_node <= 0;
    const bool cpu = c.target.partition->is_cpu();
    std::vector<std::string> row = {
        std::to_string(i), c.target.label() + (one_gpu ? " ¹" : cpu ? " ²" : ""),
        c.step.nodes > 1 ? fmt::format("{} ({}n{})", c.layout.gpus(), c.step.nodes, fewer_ranks(c, "×"))
                         : std::to_string(c.layout.gpus()),
        layout_short(c.layout),
        fmt::format("{:.1f}/{:.0f}", c.memory.total / kGiB, c.target.partition->accelerator.memory_gib),
        duration(c.step.step_s), pct(c.efficiency), duration(c.days * 86400.0),
        with_commas(static_cast<int64_t>(std::llround(c.gpu_hours))), c.route.name};
    if (energy)
      row.insert(row.end() - 1, c.energy_kwh > 0
                                    ? with_commas(static_cast<int64_t>(std::llround(c.energy_kwh)))
                                    : "?");
    if (cost)
      row.insert(row.end() - 1, c.cost >= 0 ? with_commas(static_cast<int64_t>(std::llround(c.cost))) : "?");
    if (marks) row.push_back(c.runs() ? "yes" : "no");
    rows.push_back(std::move(row));
    if (!c.runs()) gaps += fmt::format("  #{} does not run in `aiscale train` yet: {}\n", i, c.engine_gap);
  }
  if (res.ranked.empty()) {
    out += "  No layout that `aiscale train` runs today fits any partition (reasons below).\n";
    if (!marks) out += "  --include-unsupported plans the layouts it cannot run yet, marked.\n";
  } else {
    out += text_table(rows, 2);
  }
  out += gaps;
  if (!res.ranked.empty())
    out += fmt::format("  layout: dp×tp×pp, ZeRO stage (Z), micro-batch×accumulation{}; mem: used/capacity "
                       "per GPU;\n  eff: against one GPU of the same kind running the whole batch "
                       "without communication, over the GPUs allocated.\n",
                       r.pins.offload ? " (off: optimizer offloaded)" : "");
  if (std::any_of(res.ranked.begin(), res.ranked.end(),
                  [](const Candidate& c) { return c.target.partition->gpus_per_node <= 0; }))
    out += "  ¹ node layout not in the catalogue: planned on one GPU (add nodes and gpus_per_node "
           "with --systems FILE).\n";
  if (std::any_of(res.ranked.begin(), res.ranked.end(),
                  [](const Candidate& c) { return c.target.partition->is_cpu(); }))
    out += "  ² CPU partition: one rank per node, so GPUs = nodes, mem = RAM per node, GPU-h = node-hours.\n";
  if (!res.rejected.empty()) {
    // Partitions refused for the same reason are listed together.
    out += "\nNot planned:\n";
    std::vector<std::pair<std::string, std::vector<std::string>>> groups;
    for (const auto& rj : res.rejected) {
      auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == rj.reason; });
      if (it == groups.end()) groups.push_back({rj.reason, {rj.target.label()}});
      else it->second.push_back(rj.target.label());
    }
    for (const auto& [reason, labels] : groups) {
      std::string names;
      for (const auto& l : labels) names += (names.empty() ? "" : ", ") + l;
      out += fmt::format("  {}: {}\n", names, reason);
    }
  }
  if (res.ranked.empty()) return wrap_lines(out, 119);
  out += "\n";
  out += best_detail(r, res, res.ranked.front(), explain);
  if (!explain) {
    out += "\n--explain: the breakdowns, the figures and their sources, calibration and assumptions; "
           "--json for scripts.\n";
    return wrap_lines(out, 119);
  }
  const Candidate& best = res.ranked.front();
  out += "\n";
  out += figures_text(best.figures, best.target.label(), best.layout.transport);
  out += "\n";
  out += engine_support_summary(best.target.partition->is_cpu());
  out += " (plan/engine_support.cpp).\n";
  out += "\n";
  out += model_terms_text(r, cal, a, best.layout.transport);
  return wrap_lines(out, 119);
}

std::string scaling_text(const PlanRequest& r, const ScalingCurve& c, const Calibration& cal,
                         const Assumptions& a) {
  const Workload& w = r.workload;
  const Partition& p = *c.target.partition;
  std::string out = workload_text(r, nullptr);
  out += fmt::format("\nPredicted scaling of {} on {}: {}× {} per node, {}, {}; {}\n",
                     w.name, c.target.label(), p.gpus_per_node, p.accelerator.id, network_text(p),
                     to_string(p.network.topology), to_string(r.precision));
  out += fmt::format("Base layout (fewest nodes that fit): {}\n\n", c.base.describe());
  const char* unit = w.is_transformer() ? "tokens/s" : "images/s";
  std::string not_runnable;  // what `aiscale train` lacks for a row marked *
  bool fewer_per_node = false;  // a row places fewer ranks per node than GPUs
  auto rows_for = [&](const std::vector<ScalingRow>& rows_in, bool strong) {
    std::vector<std::vector<std::string>> rows = {
        {"nodes", "GPUs", "dp×tp×pp", "mb×acc", "batch", "step", unit, "per GPU", "speedup", "eff",
         "train", "epoch", "exposed comm", "MFU"}};
    for (const auto& row : rows_in) {
      if (!row.run) {
        rows.push_back({std::to_string(row.nodes), std::to_string(row.gpus), "-", "-", "-", "-", "-",
                        "-", "-", "-", "-", "-", "-", row.note.size() > 60 ? row.note.substr(0, 57) + "..." : row.note});
        continue;
      }
      const Candidate& x = *row.run;
      const double tput = w.is_transformer() ? x.step.tokens_per_s : x.step.samples_per_s;
      const double comm = x.step.dp_exposed_s + x.step.overlap_cost_s + x.step.tp_comm_s + x.step.pp_comm_s;
      if (!x.runs()) not_runnable = x.engine_gap;
      if (x.layout.ranks_per_node > 0) fewer_per_node = true;
      rows.push_back({std::to_string(row.nodes) + fewer_ranks(x, "×"), std::to_string(row.gpus),
                      x.layout.shape() + (x.runs() ? "" : " *"),
                      fmt::format("{}×{}", x.layout.micro_batch, x.layout.grad_accum),
                      std::to_string(x.layout.global_batch()), duration(x.step.step_s), compact(tput),
                      compact(tput / static_cast<double>(row.gpus)), fmt::format("{:.2f}", row.speedup),
                      fmt::format("{:.2f}", row.efficiency), fmt::format("{:.2f}", x.eff_train),
                      fmt::format("{:.2f}", x.eff_epoch),
                      fmt::format("{} ({:.0f}%)", duration(comm), 100.0 * comm / x.step.step_s),
                      pct(x.step.mfu)});
    }
    (void)strong;
    return text_table(rows, 0);
  };
  out += fmt::format("Strong scaling: fixed global batch of {} {}; speedup T(n₀)/T(n), efficiency "
                     "speedup × n₀/n (n: the GPUs allocated)\n", c.global_batch,
                     w.is_transformer() ? "sequences" : "images");
  out += rows_for(c.strong, true);
  out += fmt::format("\nWeak scaling: micro-batch {} × accumulation {} per model copy; efficiency "
                     "= throughput per GPU allocated at n / at n₀\n", c.base.micro_batch,
                     c.base.grad_accum);
  out += rows_for(c.weak, false);
  const EpochInputs epoch_in = epoch_inputs(r);
  out += fmt::format(
      "\nbatch: global batch; eff: per batch (the step alone); train: per training part (steps, the "
      "partial last batch, loading not hidden); epoch: also start-up and validation, for an epoch of {} "
      "samples ({}; docs/guide/planner.md, \"Per-epoch figures\").\n",
      with_commas(static_cast<int64_t>(std::llround(epoch_in.samples))),
      w.is_transformer() ? "--samples-per-epoch, else one pass over --tokens" : "--images");
  if (fewer_per_node)
    out += fmt::format("nodes: the nodes a row uses; ×k/{}: k ranks on each node's {} GPUs, where the node's host "
                       "memory holds fewer ranks than it has GPUs (12 bytes per parameter per rank, as the "
                       "planner counts it); the job allocates the whole nodes, which eff, train and epoch count.\n",
                       p.gpus_per_node, p.gpus_per_node);
  if (!not_runnable.empty())
    out += fmt::format("\n  * does not run in `aiscale train` yet: {}\n", not_runnable);
  out += "\nThese are predictions of the performance model, not measurements.\n\n";
  out += figures_text(c.figures, c.target.label(), c.base.transport);
  out += "\n";
  out += model_terms_text(r, cal, a, c.base.transport);
  return wrap_lines(out, 119);
}

}  // namespace aiscale::plan
