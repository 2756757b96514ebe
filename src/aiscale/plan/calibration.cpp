#include "aiscale/plan/calibration.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <tuple>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "aiscale/core/error.h"
#include "aiscale/plan/collectives.h"
#include "aiscale/plan/machine_profile.h"
#include "aiscale/plan/perf.h"

namespace aiscale::plan {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  return out;
}

// The id of the entry (an accelerator or a CPU model) with the longest device_names
// pattern found in a reported device name, case-insensitive; "" when none is.
template <typename Entries>
std::string longest_match(const Entries& entries, std::string_view device_name) {
  const std::string name = lower(device_name);
  std::string best;
  size_t best_len = 0;
  for (const auto& e : entries)
    for (const auto& pattern : e.device_names) {
      const std::string p = lower(pattern);
      if (!p.empty() && name.find(p) != std::string::npos && p.size() > best_len) {
        best = e.id;
        best_len = p.size();
      }
    }
  return best;
}

const json& need(const json& j, const char* key, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null())
    fail("{}: bench result has no \"{}\": re-run the benchmark with a current aiscale, or "
         "remove the line", where, key);
  return *it;
}

double need_number(const json& j, const char* key, const std::string& where) {
  const json& v = need(j, key, where);
  if (!v.is_number()) fail("{}: \"{}\" must be a number", where, key);
  return v.get<double>();
}

// A number the result may leave out (or null): `fallback` then.
double number_or(const json& j, const char* key, double fallback) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : fallback;
}

// How far apart two positive sizes are, in log scale (values below 1 count as 1).
double log_distance(double a, double b) {
  return std::fabs(std::log(std::max(a, 1.0)) - std::log(std::max(b, 1.0)));
}

std::string text(const json& j, const char* key) {
  auto it = j.find(key);
  return (it != j.end() && it->is_string()) ? it->get<std::string>() : std::string();
}

std::vector<std::string> jsonl_files(const std::string& path) {
  std::vector<std::string> out;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    for (const auto& e : fs::recursive_directory_iterator(path, ec))
      if (e.is_regular_file() && (e.path().extension() == ".jsonl" || e.path().extension() == ".json"))
        out.push_back(e.path().string());
    std::sort(out.begin(), out.end());
  } else if (fs::is_regular_file(path, ec)) {
    out.push_back(path);
  } else {
    fail("calibration file '{}' does not exist: give the JSON Lines file (or a directory of "
         "them) that `aiscale bench` wrote", path);
  }
  return out;
}

// The step's spread from its median and p90 (a normal spread: p90 = median + 1.2816 σ), as
// a fraction of the median; 0 where the result lacks either.
double step_spread_of(const json& j) {
  const double median = number_or(j, "step_time_median_s", 0);
  const double p90 = number_or(j, "step_time_p90_s", 0);
  if (!(median > 0) || !(p90 > median)) return 0.0;
  return (p90 - median) / (1.2816 * median);
}

// A CPU result: utilisation of the cores it used (threads × clock × fp32 FLOPs per cycle).
void read_cpu_language(const json& j, const std::string& where, const Catalog& cat, Calibration& c) {
  MfuSample s;
  s.device = need(j, "device", where).get<std::string>();
  const std::string id = match_cpu(cat, s.device);
  const CpuModel* cpu = id.empty() ? nullptr : cat.find_cpu(id);
  if (!cpu) {
    c.notes.push_back(fmt::format("{}: CPU '{}' matches no [[cpu]] device_names in the catalogue; "
                                  "not used (add the name to the CPU model's device_names)",
                                  where, s.device));
    return;
  }
  if (text(j, "precision") != "fp32") {
    c.notes.push_back(where + ": CPU result not in fp32; not used");
    return;
  }
  s.accelerator_id = "cpu:" + cpu->id;
  s.precision = Precision::fp32;
  s.model = text(j, "model");
  s.host = text(j, "host");
  s.date = text(j, "date");
  s.n_params = static_cast<int64_t>(need_number(j, "n_params", where));
  s.threads = static_cast<int>(need_number(j, "threads", where));
  s.world_size = static_cast<int>(number_or(j, "world_size", 1));
  s.achieved_tflops = need_number(j, "achieved_tflops_per_device", where);
  s.step_spread = step_spread_of(j);
  const double peak = s.threads * cpu->ghz * 1e9 * cpu->fp32_flops_per_cycle;
  s.utilisation = peak > 0 ? s.achieved_tflops * 1e12 / peak : 0.0;
  if (!(s.utilisation > 0) || s.utilisation > 1.0)
    fail("{}: achieved {:.1f} GFLOP/s is {:.0f}% of {} core(s) of {} at their fp32 peak: the "
         "result, its \"threads\" or the CPU model is wrong", where, s.achieved_tflops * 1e3,
         s.utilisation * 100, s.threads, cpu->id);
  s.source = where;
  c.utilisation.push_back(std::move(s));
}

// A multi-GPU result over the copy engines that carries its 1-GPU baseline: the baseline
// step is the same tokens per GPU at the baseline rate. ZeRO-1 (its all-gather) and
// accumulation (fewer exchanges per step) would mix other costs in: noted, not used.
void read_copy_engine(const json& j, const MfuSample& s, Calibration& c) {
  const double base = number_or(j, "baseline_tokens_per_s", 0);
  const double step = number_or(j, "step_time_median_s", 0);
  const double accum = number_or(j, "grad_accum", 1);
  const double tokens = number_or(j, "batch", 0) * number_or(j, "seq", 0) * accum;
  if (number_or(j, "zero_stage", 0) != 0 || accum > 1 || !(base > 0) || !(step > 0) ||
      !(tokens > 0)) {
    c.notes.push_back(fmt::format("{}: copy-engine run without ZeRO and accumulation and with its "
                                  "1-GPU baseline (--baseline-tokens-per-s) needed for the "
                                  "copy-engine slowdown; not used for it", s.source));
    return;
  }
  c.copy_engine.push_back({s.accelerator_id, s.device, s.n_params, s.world_size, step,
                           tokens / base, s.source});
}

void read_language(const json& j, const std::string& where, const Catalog& cat, Calibration& c) {
  if (text(j, "device_kind") == "cpu") return read_cpu_language(j, where, cat, c);
  MfuSample s;
  s.device = need(j, "device", where).get<std::string>();
  s.accelerator_id = match_device(cat, s.device);
  if (s.accelerator_id.empty()) {
    c.notes.push_back(fmt::format("{}: device '{}' matches no accelerator in the catalogue "
                                  "(add it to an accelerator's device_names)", where, s.device));
    return;
  }
  const std::string precision = need(j, "precision", where).is_string()
                                    ? j["precision"].get<std::string>() : std::string();
  try {
    s.precision = parse_precision(precision);
  } catch (const Error&) {
    c.notes.push_back(fmt::format("{}: precision '{}' is not one the planner models; not used", where, precision));
    return;
  }
  s.model = text(j, "model");
  s.host = text(j, "host");
  s.date = text(j, "date");
  s.n_params = static_cast<int64_t>(need_number(j, "n_params", where));
  s.world_size = static_cast<int>(number_or(j, "world_size", 1));
  s.gemm_elements = number_or(j, "batch", 0) * number_or(j, "seq", 0) * number_or(j, "n_embd", 0);
  s.step_spread = step_spread_of(j);
  if (j.contains("achieved_tflops_per_device") && j["achieved_tflops_per_device"].is_number()) {
    s.achieved_tflops = j["achieved_tflops_per_device"].get<double>();
  } else {
    s.achieved_tflops = need_number(j, "flops_per_token", where) *
                        need_number(j, "tokens_per_s_per_device", where) / 1e12;
  }
  // The bench reports model FLOPs. The planner's utilisation is of hardware FLOPs, so a run
  // that recomputed activations did more work than it reports: add it back.
  const std::string recompute = text(j, "recompute");
  if (recompute == "full") {
    s.achieved_tflops *= 4.0 / 3.0;
  } else if (recompute == "selective" && j.contains("n_layer") && j.contains("n_embd") &&
             j.contains("seq")) {
    const double attention = 12.0 * j["n_layer"].get<double>() * j["n_embd"].get<double>() *
                             j["seq"].get<double>();
    const double per_token = 6.0 * static_cast<double>(s.n_params) + attention;
    s.achieved_tflops *= 1.0 + attention / (3.0 * per_token);
  }
  // The measured step includes the AdamW update, which the planner prices separately
  // (memory-bound: adamw_bytes_touched per parameter this GPU updates, over its memory
  // bandwidth). Take that estimate out of the measured step, so that the utilisation
  // covers forward and backward only, as the planner's compute term does; otherwise a
  // calibrated prediction counts the optimizer twice.
  const Accelerator* acc = cat.find_accelerator(s.accelerator_id);
  if (const double step = number_or(j, "step_time_median_s", 0); step > 0) {
    const double hbm = cat.memory_bandwidth_tbs(*acc) * 1e12;
    const bool sharded = s.world_size > 1 && number_or(j, "zero_stage", 0) >= 1;
    const double updated = static_cast<double>(s.n_params) / (sharded ? s.world_size : 1);
    const double optimizer = hbm > 0 ? updated * Assumptions{}.adamw_bytes_touched / hbm : 0.0;
    if (step > 0 && optimizer > 0 && optimizer < 0.5 * step) {
      s.achieved_tflops *= step / (step - optimizer);
      s.optimizer_s = optimizer;
    }
  }
  const double peak = acc->peak_flops(s.precision);
  if (peak <= 0) {
    c.notes.push_back(fmt::format("{}: {} has no {} peak in the catalogue; result not used", where,
                                  s.accelerator_id, to_string(s.precision)));
    return;
  }
  s.utilisation = s.achieved_tflops * 1e12 / peak;
  if (!(s.utilisation > 0) || s.utilisation > 1.0)
    fail("{}: achieved {:.1f} TFLOP/s is {:.0f}% of the {} dense {} peak: the result or the "
         "device name is wrong", where, s.achieved_tflops, s.utilisation * 100, s.accelerator_id,
         to_string(s.precision));
  s.source = where;
  if (s.world_size > 1 && text(j, "grad_transport") == "copy-engine") read_copy_engine(j, s, c);
  c.utilisation.push_back(std::move(s));
}

// `aiscale bench loader`: images/s per worker thread (one record per thread count; the
// planner keeps the one with the most threads, the rate a loaded host sustains).
void read_loader(const json& j, const std::string& where, Calibration& c) {
  const double per_thread = number_or(j, "images_per_s_per_thread", 0);
  const int threads = static_cast<int>(number_or(j, "threads", 0));
  if (!(per_thread > 0) || threads < 1) {
    c.notes.push_back(where + ": loader result without images_per_s_per_thread and threads; not used");
    return;
  }
  if (!c.loader.empty() && c.loader.front().threads >= threads) return;
  c.loader.assign(1, {threads, per_thread, text(j, "host"), where});
}

void read_allreduce(const json& j, const std::string& where, const Catalog& cat, Calibration& c) {
  BusSample s;
  s.device = text(j, "device");
  s.accelerator_id = s.device.empty() ? "" : match_device(cat, s.device);
  s.backend = text(j, "backend");
  s.system_id = text(j, "system");
  s.world_size = static_cast<int>(need_number(j, "world_size", where));
  s.bytes = need_number(j, "bytes", where);
  s.busbw_bytes_per_s = need_number(j, "busbw_GBps", where) * 1e9;
  if (s.world_size < 2) return;  // a single rank moves nothing
  if (!s.system_id.empty()) {
    const System* sys = cat.find_system(s.system_id);
    if (!sys) {
      c.notes.push_back(fmt::format("{}: system '{}' is not in the catalogue; result not used",
                                    where, s.system_id));
      return;
    }
    s.system_id = sys->id;
  }
  if (j.contains("nodes") && j["nodes"].is_number()) {
    s.nodes = j["nodes"].get<int>();
  } else if (!s.system_id.empty()) {
    // Infer nodes from the system's GPUs per node when the result does not say.
    for (const auto& p : cat.find_system(s.system_id)->partitions)
      if (p.plannable() && p.accelerator.id == s.accelerator_id && p.gpus_per_node > 0)
        s.nodes = std::max(1, (s.world_size + p.gpus_per_node - 1) / p.gpus_per_node);
  }
  if (s.nodes > 1 && s.system_id.empty()) {
    c.notes.push_back(where + ": multi-node all-reduce without a \"system\" field; not used");
    return;
  }
  if (s.nodes <= 1 && s.accelerator_id.empty()) {
    c.notes.push_back(fmt::format("{}: device '{}' matches no accelerator; not used", where, s.device));
    return;
  }
  s.source = where;
  c.bandwidth.push_back(std::move(s));
}

}  // namespace

std::string match_device(const Catalog& cat, std::string_view device_name) {
  return longest_match(cat.accelerators, device_name);
}

std::string match_cpu(const Catalog& cat, std::string_view device_name) {
  return longest_match(cat.cpus, device_name);
}

const MfuSample* Calibration::closest_cpu_utilisation(std::string_view cpu_id, int cores,
                                                      int64_t n_params) const {
  const std::string key = "cpu:" + std::string(cpu_id);
  // One-rank runs first, as for GPUs.
  const MfuSample* best = nullptr;
  std::tuple<bool, double, double> best_key{};
  for (const auto& s : utilisation) {
    if (s.accelerator_id != key) continue;
    const std::tuple<bool, double, double> k{s.world_size > 1, log_distance(s.threads, cores),
                                             log_distance(double(s.n_params), double(n_params))};
    if (!best || k < best_key) {
      best = &s;
      best_key = k;
    }
  }
  return best;
}

Calibration load_calibration(const std::vector<std::string>& paths, const Catalog& cat) {
  Calibration c;
  for (const auto& path : paths)
    for (const auto& file : jsonl_files(path)) {
      std::ifstream in(file);
      if (!in) fail("cannot read calibration file '{}'", file);
      c.files.push_back(file);
      std::string line;
      int lineno = 0;
      while (std::getline(in, line)) {
        ++lineno;
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        const std::string where = fmt::format("{}:{}", file, lineno);
        json j;
        try {
          j = json::parse(line);
        } catch (const json::parse_error& e) {
          fail("{}: not valid JSON ({}): calibration files are JSON Lines, one result per line",
               where, e.what());
        }
        if (!j.is_object()) fail("{}: expected a JSON object per line", where);
        const std::string bench = text(j, "benchmark");
        if (bench == "language") read_language(j, where, cat, c);
        else if (bench == "allreduce") read_allreduce(j, where, cat, c);
        else if (bench == "loader") read_loader(j, where, c);
        else c.notes.push_back(fmt::format("{}: benchmark '{}' not used for calibration", where, bench));
      }
    }
  return c;
}

const MfuSample* Calibration::closest_utilisation(std::string_view accel, Precision p,
                                                  int64_t n_params) const {
  // One-GPU runs first: a multi-GPU step also holds its communication, which the model
  // prices on its own, so such a run stands in only where no 1-GPU run exists.
  const MfuSample* best = nullptr;
  bool best_multi = false;
  double best_dist = 0;
  for (const auto& s : utilisation) {
    if (s.accelerator_id != accel || s.precision != p) continue;
    const bool multi = s.world_size > 1;
    const double d = log_distance(double(s.n_params), double(n_params));
    // Ties: the higher utilisation (a better-tuned run of the same size).
    const bool tie = best && multi == best_multi && std::fabs(d - best_dist) <= 1e-12;
    if (!best || (tie ? s.utilisation > best->utilisation
                      : std::make_pair(multi, d) < std::make_pair(best_multi, best_dist))) {
      best = &s;
      best_multi = multi;
      best_dist = d;
    }
  }
  return best;
}

const BusSample* Calibration::intra_node(std::string_view accel, std::string_view system) const {
  const BusSample* best = nullptr;
  auto rank = [&](const BusSample& s) { return std::make_pair(s.system_id == system ? 1 : 0, s.bytes); };
  for (const auto& s : bandwidth) {
    if (s.nodes > 1 || s.accelerator_id != accel) continue;
    if (!s.system_id.empty() && s.system_id != system) continue;
    if (!best || rank(s) > rank(*best)) best = &s;
  }
  return best;
}

const CopyEngineSample* Calibration::closest_copy_engine(std::string_view accel,
                                                         int64_t n_params) const {
  const CopyEngineSample* best = nullptr;
  std::pair<double, int> best_key{0, 0};
  for (const auto& s : copy_engine) {
    if (s.accelerator_id != accel) continue;
    const std::pair<double, int> key{log_distance(double(s.n_params), double(n_params)),
                                     -s.world_size};
    if (!best || key < best_key) {
      best = &s;
      best_key = key;
    }
  }
  return best;
}

const BusSample* Calibration::inter_node(std::string_view system) const {
  const BusSample* best = nullptr;
  for (const auto& s : bandwidth)
    if (s.nodes > 1 && s.system_id == system &&
        (!best || std::make_pair(s.nodes, s.bytes) > std::make_pair(best->nodes, best->bytes)))
      best = &s;
  return best;
}

std::optional<GemmCurve> fit_gemm_curve(const Calibration& cal, std::string_view accelerator_id,
                                        Precision p) {
  std::vector<const MfuSample*> pts;
  for (const auto& s : cal.utilisation)
    if (s.accelerator_id == accelerator_id && s.precision == p && s.world_size == 1 &&
        s.gemm_elements > 0 && s.utilisation > 0)
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

  const double default_u = acc.cpu_node ? a.cpu_utilisation
                           : w.is_transformer() ? a.transformer_utilisation : a.cnn_utilisation;
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
    if (const auto fit = fit_gemm_curve(cal, acc.id, p)) {
      // A measured sweep over micro-batch and width: the curve itself is measured.
      m.utilisation = {fit->u_max, true,
                       fmt::format("fitted to {}: {:.1f}% at large GEMMs", fit->sources, fit->u_max * 100)};
      m.utilisation_at_elements = 0;
      m.gemm_half_elements = {fit->half_elements, true,
                              fmt::format("fitted to {}", fit->sources)};
    }
  if (w.is_transformer() && !acc.cpu_node && !m.gemm_half_elements.measured)
    if (const MfuSample* s = cal.closest_utilisation(acc.id, p, w.params())) {
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
