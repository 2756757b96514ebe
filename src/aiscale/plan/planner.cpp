#include "aiscale/plan/planner.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>

#include <fmt/format.h>

#include "aiscale/core/error.h"
#include "aiscale/plan/objective.h"
#include "aiscale/plan/units.h"

namespace aiscale::plan {
namespace {

long global_batch_of(const PlanRequest& r) {
  return r.global_batch > 0 ? r.global_batch : r.workload.default_global_batch;
}

std::vector<int> divisors(long n, long cap) {
  std::vector<int> out;
  for (long d = 1; d <= std::min(n, cap); ++d)
    if (n % d == 0) out.push_back(static_cast<int>(d));
  return out;
}

template <typename T>
bool pinned_out(const std::optional<T>& pin, T value) {
  return pin && *pin != value;
}

// Within kSimplerWins of each other, prefer the simpler layout: no recomputation, smaller
// tensor and pipeline sizes, lower ZeRO stage, then the larger micro-batch (the model does
// not price the overheads each of these adds in practice). Compared by time per sample,
// which is step time when the global batch is fixed and still fair when it is not (weak
// scaling: a fixed batch per GPU).
constexpr double kSimplerWins = 0.03;

bool better(const Candidate& x, const Candidate& y) {
  const double tx = x.step.step_s / x.step.samples_per_step;
  const double ty = y.step.step_s / y.step.samples_per_step;
  if (tx < ty * (1.0 - kSimplerWins)) return true;
  if (ty < tx * (1.0 - kSimplerWins)) return false;
  auto key = [](const Layout& l) {
    return std::make_tuple(static_cast<int>(l.recompute), l.tp, l.pp, l.zero, -l.micro_batch);
  };
  if (key(x.layout) != key(y.layout)) return key(x.layout) < key(y.layout);
  return tx < ty;
}

// Scaling against the fewest GPUs that fit, over the whole run (start-up included): per GPU
// used, and per GPU allocated (what --min-efficiency bounds: the job holds, and pays for,
// the idle GPUs of nodes with fewer ranks than GPUs).
void set_scaling(Candidate& c, const Candidate& base, bool weak) {
  scale_against(c, base, weak, base.days, c.days);
  epoch_efficiencies(c, base);
}

// The one baseline of the efficiency column: one GPU of this partition running this
// step's samples at its best micro-batch, without communication or a memory limit.
void set_efficiency(Candidate& c, const PlanRequest& r, const Assumptions& a) {
  const Partition& part = *c.target.partition;
  const Workload w = workload_on(r, part);
  const long samples = static_cast<long>(std::llround(c.step.samples_per_step));
  double best = std::numeric_limits<double>::infinity();
  for (int mb = 1; mb <= (w.is_transformer() ? 64 : 256); mb *= 2) {
    if (samples % mb != 0) continue;
    Layout one{1, 1, 1, 0, mb, static_cast<int>(samples / mb), Recompute::none, GradTransport::nccl};
    if (layout_problem(one, w)) continue;
    const StepEstimate e = estimate_step(w, one, part, c.figures, r.precision, a);
    best = std::min(best, e.compute_s + e.optimizer_s);
  }
  if (!std::isfinite(best)) best = c.step.compute_s * c.layout.gpus();  // no divisor: this layout's own
  c.ideal_step_s = best;
  c.efficiency_used = best / (c.step.step_s * static_cast<double>(c.layout.gpus()));
  c.efficiency = best / (c.step.step_s * static_cast<double>(c.allocated_gpus()));
  c.efficiency_note.clear();
  if (c.efficiency_used > 1.0)
    c.efficiency_note = c.layout.zero >= 1
                            ? "above 1: ZeRO shards the optimizer update over the GPUs, which saves "
                              "more than the communication costs"
                            : "above 1: the per-GPU GEMMs are larger than one GPU's best micro-batch";
}

// 1, 2, 4, ... GPUs inside one node, then whole nodes doubling, up to `upto`;
// `exact` (when > 0) is always included.
std::vector<long> gpu_counts(const Partition& part, long upto, long exact) {
  std::vector<long> out;
  const long g = part.gpus_per_node > 0 ? part.gpus_per_node : 1;
  for (long n = 1; n < g && n <= upto; n *= 2) out.push_back(n);
  for (long n = g; n <= upto; n *= 2) out.push_back(n);
  if (exact > 0) {
    out.push_back(exact);
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    out.erase(std::remove_if(out.begin(), out.end(), [&](long n) { return n > exact; }), out.end());
  }
  return out;
}

std::string size_reason(const Partition& part, long gpus) {
  if (part.gpus_per_node <= 0)
    return fmt::format("GPUs per node are not in the catalogue for {}: it is planned on one GPU "
                       "only (add nodes and gpus_per_node with --systems FILE)", part.name);
  if (!part.network.known() || part.nodes <= 0)
    return fmt::format("{} is planned within one node of {} GPUs (its network or node count is "
                       "not in the catalogue); {} GPUs asked", part.name, part.gpus_per_node, gpus);
  return fmt::format("{} has {} GPUs ({} nodes × {}); {} asked", part.name, part.max_gpus(),
                     part.nodes, part.gpus_per_node, gpus);
}

// The most ranks per node below `l`'s full placement (a divisor of the node's GPUs, largest
// first) whose ranks fit the node's host memory, for the same GPUs on more nodes (at most
// the partition's); 0 where none does, `gap` (the full placement's shortfall) then saying
// why fewer do not help either (or replaced by one rank's, where not even that fits).
int fewer_ranks_per_node(const PlanRequest& r, const Partition& part, const Workload& w,
                         const Layout& l, std::string& gap) {
  const long gpus = l.gpus();
  const int full = static_cast<int>(std::min<long>(part.gpus_per_node, gpus));
  if (full <= 1) return 0;  // one rank per node already: the gap says so
  if (std::string one = host_memory_gap(w, l, 1, part.ram_gib); !one.empty()) {
    gap = "not even one rank per node fits: " + one;
    return 0;
  }
  std::string limit;
  if (r.grad_transport == GradTransport::copy_engine)
    limit = "the copy-engine transport keeps the ranks on one node";
  else if (!part.network.known() || part.nodes <= 0)
    limit = fmt::format("{} is planned within one node", part.name);
  for (int k = full - 1; k >= 1 && limit.empty(); --k) {
    if (part.gpus_per_node % k != 0 || gpus % k != 0) continue;
    if (gpus / k > part.nodes)
      limit = fmt::format("{} rank{} per node would need {} nodes, the partition has {}", k,
                          k == 1 ? "" : "s", gpus / k, part.nodes);
    else if (l.tp > k)
      limit = fmt::format("{} rank{} per node would split the tensor-parallel group of {} over "
                          "nodes", k, k == 1 ? "" : "s", l.tp);
    else if (host_memory_gap(w, l, k, part.ram_gib).empty())
      return k;
  }
  if (!limit.empty()) gap += "; fewer ranks per node do not help: " + limit;
  return 0;
}

}  // namespace

std::string place_in_host_memory(const PlanRequest& r, const Partition& part, const Workload& w,
                                 Layout& l) {
  l.ranks_per_node = 0;
  std::string gap = host_memory_gap(w, l, part.gpus_per_node, part.ram_gib);
  if (gap.empty()) return "";
  if (const int k = fewer_ranks_per_node(r, part, w, l, gap); k > 0) {
    l.ranks_per_node = k;
    l.transport = GradTransport::nccl;  // the ranks span nodes
    return "";
  }
  return gap;
}

int Candidate::ranks_per_node() const {
  if (layout.ranks_per_node > 0) return layout.ranks_per_node;
  const long per_node = target.partition && target.partition->gpus_per_node > 0
                            ? target.partition->gpus_per_node : 1;
  return static_cast<int>(std::min(per_node, layout.gpus()));
}

long Candidate::allocated_gpus() const {
  if (layout.ranks_per_node <= 0 || !target.partition) return layout.gpus();
  return static_cast<long>(step.nodes) * std::max(1, target.partition->gpus_per_node);
}

void finish_candidate(Candidate& c, const PlanRequest& r, const Assumptions& a, const Catalog& cat,
                      const Calibration& cal) {
  const Workload& w = r.workload;
  const EpochInputs in = epoch_inputs(r);
  c.epochs = w.is_transformer() ? r.tokens / static_cast<double>(w.seq_len) / in.samples : r.epochs;
  c.startup_s = a.startup_fixed_s + a.startup_per_node_s * c.step.nodes;
  const EpochFigures f = epoch_figures(*c.target.partition, c.step.nodes, c.figures.node_bytes_per_s.value,
                                       cal, r.decode_per_core.value_or(0), a);
  // Each epoch carries its share of the one start-up: the run is epochs × epoch.
  c.epoch = estimate_epoch(in, c.step, c.layout, f, c.startup_s / c.epochs);
  c.steps = c.epochs * c.epoch.steps;
  const double seconds = c.epochs * c.epoch.epoch_s;
  c.days = seconds / 86400.0;
  c.gpu_hours = seconds / 3600.0 * static_cast<double>(c.allocated_gpus());
  // The ranks' GPUs at board power, the allocated GPUs without a rank at the idle share.
  const double busy = static_cast<double>(c.layout.gpus());
  const double idle = static_cast<double>(c.allocated_gpus()) - busy;
  c.energy_kwh = c.target.partition->is_cpu()
                     ? 0.0
                     : seconds / 3600.0 * c.target.partition->accelerator.board_power_w *
                           (busy + a.idle_power_fraction * idle) / 1000.0;
  if (const auto p = r.prices.find(c.target.label()); p != r.prices.end()) c.cost = c.gpu_hours * p->second;
  else if (const auto s = r.prices.find(c.target.system->id); s != r.prices.end()) c.cost = c.gpu_hours * s->second;
  c.route = access_route(cat.access, c.gpu_hours, seconds, *c.target.system,
                         c.target.partition->is_cpu(), r.applicant);
}

void scale_against(Candidate& c, const Candidate& base, bool weak, double base_time,
                   double time) {
  const double n = static_cast<double>(c.layout.gpus());
  const double n0 = static_cast<double>(base.layout.gpus());
  const double held = static_cast<double>(c.allocated_gpus());
  const double held0 = static_cast<double>(base.allocated_gpus());
  c.base_gpus = base.layout.gpus();
  c.base_allocated_gpus = base.allocated_gpus();
  c.weak = weak;
  c.scaling_used = weak ? (c.step.samples_per_s / n) / (base.step.samples_per_s / n0)
                        : (base_time * n0) / (time * n);
  c.scaling = c.scaling_used * (n / held) / (n0 / held0);
}

void epoch_efficiencies(Candidate& c, const Candidate& base) {
  const double n = static_cast<double>(c.allocated_gpus());
  const double n0 = static_cast<double>(base.allocated_gpus());
  auto ratio = [&](double samples, double s, double samples0, double s0) {
    return s > 0 && s0 > 0 && samples0 > 0 ? (samples / s / n) / (samples0 / s0 / n0) : 1.0;
  };
  c.eff_batch = ratio(c.step.samples_per_step, c.step.step_s, base.step.samples_per_step, base.step.step_s);
  c.eff_train = ratio(c.epoch.samples, c.epoch.train_part_s, base.epoch.samples, base.epoch.train_part_s);
  c.eff_epoch = ratio(c.epoch.samples, c.epoch.epoch_s, base.epoch.samples, base.epoch.epoch_s);
}

Attention attention_on(const PlanRequest& r, const Partition& part) {
  if (r.attention) return *r.attention;
  return part.is_cpu() ? Attention::materialized : Attention::flash;
}

Workload workload_on(const PlanRequest& r, const Partition& part) {
  Workload w = r.workload;
  w.attention = attention_on(r, part);
  return w;
}

std::string unplannable_reason(const Partition& part) {
  if (part.plannable()) return "";
  if (part.is_cpu())
    return fmt::format("CPU partition {} cannot be planned: its CPU model, sockets or RAM per node "
                       "are not in the catalogue (add cpu_model = \"<id from cpus.toml>\", sockets "
                       "and ram_gib with --systems FILE)", part.name);
  return fmt::format("{} is a '{}' partition: only GPU and CPU partitions are planned", part.name,
                     part.kind);
}

EpochInputs epoch_inputs(const PlanRequest& r) {
  const Workload& w = r.workload;
  EpochInputs in;
  in.source = w.data.source;
  in.decoded = w.data.decoded;
  if (r.samples_per_epoch) in.samples = *r.samples_per_epoch;
  else if (!w.is_transformer()) in.samples = r.images;
  else if (w.data.samples_per_epoch > 0) in.samples = w.data.samples_per_epoch;
  else in.samples = r.tokens / static_cast<double>(w.seq_len);
  if (r.validation_samples) in.validation_samples = *r.validation_samples;
  else if (r.validation_fraction) in.validation_samples = *r.validation_fraction * in.samples;
  else if (!w.is_transformer() && r.images != static_cast<double>(kImageNetTrainImages))
    in.validation_samples = w.data.validation_samples * r.images / kImageNetTrainImages;
  else in.validation_samples = w.data.validation_samples;
  in.bytes_per_sample = r.bytes_per_sample.value_or(w.data.bytes_per_sample);
  if (r.samples_per_epoch || r.validation_samples || r.validation_fraction || r.bytes_per_sample)
    in.source += " (with the options given)";
  return in;
}

void check_request(const PlanRequest& r) {
  const Workload& w = r.workload;
  if (r.samples_per_epoch && !(*r.samples_per_epoch >= 1))
    fail("--samples-per-epoch must be at least 1 (got {})", *r.samples_per_epoch);
  if (r.validation_samples && !(*r.validation_samples >= 0))
    fail("--validation-samples must be 0 or more (got {})", *r.validation_samples);
  if (r.validation_fraction && !(*r.validation_fraction >= 0 && *r.validation_fraction <= 1))
    fail("--validation-fraction must lie in [0, 1] (got {})", *r.validation_fraction);
  if (r.validation_samples && r.validation_fraction)
    fail("give the validation set once: --validation-samples or --validation-fraction, not both");
  if (r.bytes_per_sample && !(*r.bytes_per_sample >= 0))
    fail("--bytes-per-sample must be 0 or more (got {})", *r.bytes_per_sample);
  if (r.decode_per_core && !(*r.decode_per_core > 0))
    fail("--decode-rate must be positive images/s per core (got {})", *r.decode_per_core);
  if (w.is_transformer() && !(r.tokens > 0))
    fail("--tokens must be positive for {} (got {}): e.g. --tokens 10e9", w.name, r.tokens);
  if (!w.is_transformer() && (!(r.images > 0) || !(r.epochs > 0)))
    fail("--images and --epochs must be positive for {} (got {} and {})", w.name, r.images, r.epochs);
  if (r.gpus < 0) fail("--gpus must be positive (got {})", r.gpus);
  if (r.global_batch < 0) fail("--global-batch must be positive (got {})", r.global_batch);
  if (!(r.min_efficiency > 0) || r.min_efficiency > 1)
    fail("--min-efficiency must lie in (0, 1] (got {})", r.min_efficiency);
  // The pinned parts of the layout must be possible for this model.
  Layout probe;
  probe.tp = r.pins.tp.value_or(1);
  probe.pp = r.pins.pp.value_or(1);
  probe.zero = r.pins.zero.value_or(0);
  probe.micro_batch = r.pins.micro_batch.value_or(1);
  probe.recompute = r.pins.recompute.value_or(Recompute::none);
  probe.transport = r.grad_transport.value_or(GradTransport::nccl);
  probe.offload = r.pins.offload;
  if (probe.offload && !r.pins.zero) probe.zero = 3;  // the search tries stages 1 to 3
  validate_layout(probe, w);
  if (r.gpus > 0 && r.gpus % (static_cast<long>(probe.tp) * probe.pp) != 0)
    fail("impossible layout: {} GPUs cannot be split into tensor size {} × pipeline size {}: use "
         "a GPU count divisible by {}", r.gpus, probe.tp, probe.pp, probe.tp * probe.pp);
  const long g = global_batch_of(r);
  if (g > 0 && r.pins.micro_batch && g % *r.pins.micro_batch != 0)
    fail("impossible layout: micro-batch {} does not divide the global batch of {}", *r.pins.micro_batch, g);
}

GradTransport transport_for(const PlanRequest& r, const Partition& part, const Layout& l,
                            long gpus) {
  if (r.grad_transport) return *r.grad_transport;
  const long per_node = part.gpus_per_node > 0 ? part.gpus_per_node : 1;
  // aiscale takes the copy engines on Hopper GPUs (compute capability 9.0 or newer): in
  // the catalogue the NVIDIA accelerators with FP8 tensor cores.
  const Accelerator& acc = part.accelerator;
  const bool hopper = acc.vendor == "NVIDIA" && acc.peak_fp8 > 0;
  // (Only the transformer engine has the copy-engine transport: ResNets reduce over NCCL.)
  const bool copy_engines = r.workload.is_transformer() && !part.is_cpu() && hopper && l.dp > 1 &&
                            l.tp == 1 && l.pp == 1 && l.zero <= 1 && gpus <= per_node;
  return copy_engines ? GradTransport::copy_engine : GradTransport::nccl;
}

std::string transport_reason(const PlanRequest& r, const Partition& part, long gpus) {
  if (r.grad_transport != GradTransport::copy_engine) return "";
  if (part.is_cpu())
    return "the copy-engine transport is for GPU ranks (CPU ranks sum their gradients over "
           "MPI): use --grad-transport nccl";
  const long per_node = part.gpus_per_node > 0 ? part.gpus_per_node : 1;
  if (gpus > per_node)
    return fmt::format("the copy-engine transport works inside one node: {} GPUs span {} nodes "
                       "of {}; use at most {} GPUs, or --grad-transport nccl", gpus,
                       gpus / per_node, per_node, per_node);
  return "";
}

Search best_layout(const PlanRequest& r, const Target& t, long gpus, const MachineFigures& m,
                   const Assumptions& a, bool unsupported_too) {
  const Partition& part = *t.partition;
  const Workload w = workload_on(r, part);
  const Precision prec = r.precision;
  Search out;
  if (!part.plannable()) {
    out.reason = unplannable_reason(part);
    return out;
  }
  if (m.peak_flops <= 0) {
    out.reason = part.accelerator.unsupported_reason(prec);
    return out;
  }
  if (gpus < 1 || gpus > part.max_gpus()) {
    out.reason = size_reason(part, gpus);
    return out;
  }
  const long per_node = part.gpus_per_node > 0 ? part.gpus_per_node : 1;
  if (gpus > per_node && gpus % per_node != 0) {
    out.reason = fmt::format("{} GPUs do not fill whole nodes of {}: use a multiple of {}", gpus,
                             per_node, per_node);
    return out;
  }
  if (std::string why = transport_reason(r, part, gpus); !why.empty()) {
    out.reason = why;
    return out;
  }
  // Devices aiscale cannot drive at all: every layout there is a what-if.
  const std::string device_why = device_gap(part.accelerator, part.is_cpu());
  if (!unsupported_too && !device_why.empty()) {
    out.reason = fmt::format("{}; --include-unsupported plans it anyway, marked", device_why);
    return out;
  }
  if (!unsupported_too)
    if (std::string why = engine_gap_for_workload(w, prec, part.is_cpu()); !why.empty()) {
      out.reason = fmt::format("`aiscale train` cannot run this today: {}; --include-unsupported "
                               "plans it anyway, marked", why);
      return out;
    }
  const long gb = global_batch_of(r);
  const double capacity = part.accelerator.memory_bytes();
  const auto& pins = r.pins;

  std::vector<int> tps = w.is_transformer() ? divisors(w.gpt.n_head, std::min(gpus, per_node))
                                            : std::vector<int>{1};
  std::vector<int> mbs;
  if (w.is_transformer()) for (int b = 1; b <= 64; b *= 2) mbs.push_back(b);
  else for (int b = 1; b <= 256; b *= 2) mbs.push_back(b);
  if (pins.micro_batch &&
      std::find(mbs.begin(), mbs.end(), *pins.micro_batch) == mbs.end())
    mbs.push_back(*pins.micro_batch);
  const std::vector<Recompute> rcs =
      w.is_transformer() ? std::vector<Recompute>{Recompute::none, Recompute::selective, Recompute::full}
                         : std::vector<Recompute>{Recompute::none};

  bool any_layout = false;
  std::string engine_gap_seen;  // the first layout skipped because aiscale train lacks it
  std::string host_gap_seen;    // the first layout that fits the GPUs but not the host memory
  double least = std::numeric_limits<double>::infinity();
  Layout least_layout;
  for (int tp : tps) {
    if (pinned_out(pins.tp, tp) || gpus % tp != 0) continue;
    if (w.is_transformer()) {
      Layout shape;
      shape.tp = tp;
      if (auto why = layout_problem(shape, w)) {
        out.skipped.push_back(fmt::format("tp {} skipped: {}", tp, *why));
        continue;
      }
    }
    const long rest = gpus / tp;
    std::vector<int> pps = w.is_transformer() ? divisors(rest, w.gpt.n_layer) : std::vector<int>{1};
    for (int pp : pps) {
      if (pinned_out(pins.pp, pp)) continue;
      const int dp = static_cast<int>(rest / pp);
      for (int zero = 0; zero <= 3; ++zero) {
        // (With the optimizer offloaded one GPU still takes a ZeRO stage: aiscale offloads
        // with ZeRO-3, which on one rank shards nothing.)
        if (pinned_out(pins.zero, zero) || (dp == 1 && zero > 0 && !pins.zero && !pins.offload))
          continue;
        for (Recompute rc : rcs) {
          if (pinned_out(pins.recompute, rc)) continue;
          for (int mb : mbs) {
            if (pinned_out(pins.micro_batch, mb)) continue;
            Layout l{dp, tp, pp, zero, mb, 1, rc, GradTransport::nccl, pins.offload};
            l.transport = transport_for(r, part, l, gpus);
            if (gb > 0) {
              const long per_step = static_cast<long>(dp) * mb;
              if (gb % per_step != 0) continue;
              l.grad_accum = static_cast<int>(gb / per_step);
            }
            if (layout_problem(l, w)) continue;
            std::string gap = device_why.empty() ? engine_gap(w, l, prec, part.is_cpu()) : device_why;
            if (!gap.empty() && !unsupported_too) {
              if (engine_gap_seen.empty()) engine_gap_seen = gap;
              continue;
            }
            any_layout = true;
            MemoryBreakdown mem = memory_per_gpu(w, l, prec, a.memory,
                                                 accounting_for(gap.empty(), part.is_cpu()));
            if (mem.total > capacity) {
              if (mem.total < least) {
                least = mem.total;
                least_layout = l;
              }
              break;  // larger micro-batches need more
            }
            // A layout that fits the GPUs may still not fit the node's host memory, where
            // every rank keeps whole vectors of the model; fewer ranks per node on more
            // nodes may fit where a full node does not.
            if (gap.empty() && !part.is_cpu() && !(gap = place_in_host_memory(r, part, w, l)).empty() &&
                !unsupported_too) {
              if (host_gap_seen.empty()) host_gap_seen = gap;
              break;  // larger micro-batches need as much
            }
            Candidate c;
            c.target = t;
            c.layout = l;
            c.memory = mem;
            c.figures = m;
            c.attention = w.attention;
            c.step = estimate_step(w, l, part, m, prec, a, accounting_for(gap.empty(), part.is_cpu()));
            c.engine_gap = std::move(gap);
            if (!out.best || better(c, *out.best)) out.best = std::move(c);
          }
        }
      }
    }
  }
  if (out.best) return out;
  if (!host_gap_seen.empty()) {
    out.reason = fmt::format("no layout of {} GPU{} that `aiscale train` runs today fits the "
                             "nodes' host memory ({}); --include-unsupported plans it anyway, "
                             "marked", gpus, gpus == 1 ? "" : "s", host_gap_seen);
  } else if (!any_layout && !engine_gap_seen.empty()) {
    out.reason = fmt::format("no layout of {} GPU{} that `aiscale train` runs today ({}); "
                             "--include-unsupported plans it anyway, marked", gpus,
                             gpus == 1 ? "" : "s", engine_gap_seen);
  } else if (!any_layout) {
    const bool pinned = pins.tp || pins.pp || pins.zero || pins.micro_batch || pins.recompute ||
                        pins.offload;
    if (gb > 0 && !pinned)
      out.reason = fmt::format("the global batch of {} {} cannot be split evenly over {} GPUs: "
                               "raise --global-batch or use fewer GPUs", gb,
                               w.is_transformer() ? "sequences" : "images", gpus);
    else
      out.reason = fmt::format("no layout of {} GPUs matches the fixed layout options{}", gpus,
                               gb > 0 ? fmt::format(" and a global batch of {}", gb) : "");
  } else {
    out.reason = fmt::format("does not fit in memory: the leanest layout on {} GPU{} ({}) needs {} "
                             "per GPU, the {} has {}", gpus, gpus == 1 ? "" : "s",
                             least_layout.describe(), gib(least),
                             part.accelerator.id, gib(capacity));
  }
  // The sizes the model's shape ruled out, which might have fitted otherwise.
  if (!out.skipped.empty()) {
    std::string skipped;
    for (const auto& why : out.skipped) skipped += (skipped.empty() ? "" : "; ") + why;
    out.reason += fmt::format(" ({})", skipped);
  }
  return out;
}

namespace {

// The candidates of one partition over the GPU counts searched, each finished (time,
// GPU-hours, route) with its scaling against the first; stops once scaling stayed below
// --min-efficiency twice (it only falls from there).
struct Sweep {
  std::vector<Candidate> runs;
  std::string reason;  // why nothing fits, when runs is empty
};

Sweep sweep(const PlanRequest& r, const Target& t, const MachineFigures& m, const Catalog& cat,
            const Calibration& cal, const Assumptions& a, bool unsupported_too) {
  const Partition& part = *t.partition;
  const bool weak = global_batch_of(r) == 0;
  long cap = part.max_gpus();
  if (r.max_gpus > 0) cap = std::min(cap, r.max_gpus);
  Sweep out;
  std::string memory_reason, host_reason;
  int below = 0;
  for (long n : gpu_counts(part, r.gpus > 0 ? r.gpus : cap, r.gpus)) {
    if (r.gpus > 0 && n != r.gpus) continue;
    Search s = best_layout(r, t, n, m, a, unsupported_too);
    if (!s.best) {
      // Memory is the telling reason where a count has layouts but none fits; later counts
      // often fail only on how the batch splits. A count whose layouts fit the GPUs but not
      // the nodes' host memory says more than the counts that fit neither.
      if (s.reason.rfind("does not fit in memory", 0) == 0) memory_reason = s.reason;
      if (host_reason.empty() && s.reason.find("fits the nodes' host memory") != std::string::npos)
        host_reason = s.reason;
      out.reason = !host_reason.empty() ? host_reason : memory_reason.empty() ? s.reason : memory_reason;
      if (!out.runs.empty()) break;  // it fitted before: more GPUs only fail on the batch size
      continue;
    }
    Candidate c = std::move(*s.best);
    finish_candidate(c, r, a, cat, cal);
    set_scaling(c, out.runs.empty() ? c : out.runs.front(), weak);
    set_efficiency(c, r, a);
    out.runs.push_back(std::move(c));
    below = out.runs.back().scaling < r.min_efficiency ? below + 1 : 0;
    if (below >= 2) break;
  }
  return out;
}

}  // namespace

PlanResult plan(const PlanRequest& r, const std::vector<Target>& targets, const Catalog& cat,
                const Calibration& cal, const Assumptions& a) {
  check_request(r);
  if (r.objective == Objective::smallest && !r.deadline_s)
    fail("--rank smallest needs --deadline (e.g. --deadline 3d): the smallest allocation that "
         "finishes in time");
  PlanResult res;
  res.compute = training_flops(r.workload, r.tokens, r.images, r.epochs);
  for (const Target& t : targets) {
    const Partition& part = *t.partition;
    if (!part.plannable()) {
      res.rejected.push_back({t, unplannable_reason(part)});
      continue;
    }
    const MachineFigures m = machine_figures(t, r.workload, r.precision, cal, cat, a);
    if (m.peak_flops <= 0) {
      res.rejected.push_back({t, part.accelerator.unsupported_reason(r.precision)});
      continue;
    }
    if (r.gpus > 0 && r.gpus > part.max_gpus()) {
      res.rejected.push_back({t, size_reason(part, r.gpus)});
      continue;
    }
    const Sweep runnable = sweep(r, t, m, cat, cal, a, false);
    std::string why = runnable.reason;
    if (runnable.runs.empty() && why.rfind("does not fit in memory", 0) == 0)
      why += fmt::format(" ({}; --include-unsupported plans layouts it cannot run yet, marked)",
                         engine_support_summary(part.is_cpu()));
    std::optional<Candidate> chosen = choose_count(r, runnable.runs, why);
    if (chosen) res.ranked.push_back(*chosen);
    else res.rejected.push_back({t, why});
    if (r.include_unsupported) {
      const Sweep any = sweep(r, t, m, cat, cal, a, true);
      std::string why_any;
      std::optional<Candidate> other = choose_count(r, any.runs, why_any);
      if (other && !other->runs()) res.ranked.push_back(std::move(*other));
    }
  }
  std::stable_sort(res.ranked.begin(), res.ranked.end(),
                   [&](const Candidate& x, const Candidate& y) { return ranks_before(r, x, y); });
  return res;
}

}  // namespace aiscale::plan
