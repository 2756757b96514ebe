// Reading calibration results (calibration.h): `aiscale bench` JSON Lines files turned
// into utilisation, bus-bandwidth, copy-engine and loader samples, and the lookups that
// pick the sample nearest to a planned run. What the planner makes of them per partition
// is machine_figures.cpp.
#include "aiscale/plan/calibration.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <tuple>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "aiscale/core/ascii.h"
#include "aiscale/core/error.h"
#include "aiscale/core/fs.h"

namespace aiscale::plan {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string lower(std::string_view s) { return ascii_lower(s); }

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
  auto files = files_or_folder(path, {".jsonl", ".json"}, true);
  if (!files)
    fail("calibration file '{}' does not exist: give the JSON Lines file (or a directory of "
         "them) that `aiscale bench` wrote", path);
  return *files;
}

// The step's spread from its median and p90 (a normal spread: p90 = median + 1.2816 σ), as
// a fraction of the median; 0 where the result lacks either.
double step_spread_of(const json& j) {
  const double median = number_or(j, "step_time_median_s", 0);
  const double p90 = number_or(j, "step_time_p90_s", 0);
  if (!(median > 0) || !(p90 > median)) return 0.0;
  return (p90 - median) / (1.2816 * median);
}

// A transformer result's family: its "family", or for results written before the bench
// reported it, the model name's (the Llama shapes are named llama...).
std::string family_of(const json& j, const std::string& model) {
  std::string f = text(j, "family");
  if (f.empty()) f = model.rfind("llama", 0) == 0 ? "llama" : "gpt2";
  return f;
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
  s.family = family_of(j, s.model);
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

// The catalogue's accelerator of s.device into s.accelerator_id; false (noted in c) where
// none matches.
bool match_accelerator(MfuSample& s, const std::string& where, const Catalog& cat, Calibration& c) {
  s.accelerator_id = match_device(cat, s.device);
  if (s.accelerator_id.empty()) {
    c.notes.push_back(fmt::format("{}: device '{}' matches no accelerator in the catalogue "
                                  "(add it to an accelerator's device_names)", where, s.device));
    return false;
  }
  return true;
}

// `name` parsed into s.precision; false (noted in c, with the result's own `written`) where
// the planner does not model it.
bool set_precision(MfuSample& s, const std::string& name, const std::string& written,
                   const std::string& where, Calibration& c) {
  try {
    s.precision = parse_precision(name);
  } catch (const Error&) {
    c.notes.push_back(fmt::format("{}: precision '{}' is not one the planner models; not used", where, written));
    return false;
  }
  return true;
}
bool set_precision(MfuSample& s, const std::string& name, const std::string& where, Calibration& c) {
  return set_precision(s, name, name, where, c);
}

// s.achieved_tflops as a fraction of acc's dense peak into s.utilisation; false (noted in c)
// where the catalogue has no peak for s.precision. A fraction outside (0, 1] fails.
bool set_utilisation(MfuSample& s, const Accelerator& acc, const std::string& where, Calibration& c) {
  const double peak = acc.peak_flops(s.precision);
  if (peak <= 0) {
    c.notes.push_back(fmt::format("{}: {} has no {} peak in the catalogue; result not used", where,
                                  s.accelerator_id, to_string(s.precision)));
    return false;
  }
  s.utilisation = s.achieved_tflops * 1e12 / peak;
  if (!(s.utilisation > 0) || s.utilisation > 1.0)
    fail("{}: achieved {:.1f} TFLOP/s is {:.0f}% of the {} dense {} peak: the result or the "
         "device name is wrong", where, s.achieved_tflops, s.utilisation * 100, s.accelerator_id,
         to_string(s.precision));
  return true;
}

void read_language(const json& j, const std::string& where, const Catalog& cat, Calibration& c) {
  if (text(j, "device_kind") == "cpu") return read_cpu_language(j, where, cat, c);
  MfuSample s;
  s.device = need(j, "device", where).get<std::string>();
  if (!match_accelerator(s, where, cat, c)) return;
  const std::string precision = need(j, "precision", where).is_string()
                                    ? j["precision"].get<std::string>() : std::string();
  if (!set_precision(s, precision, where, c)) return;
  s.model = text(j, "model");
  s.family = family_of(j, s.model);
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
  if (!set_utilisation(s, *acc, where, c)) return;
  s.source = where;
  if (s.world_size > 1 && text(j, "grad_transport") == "copy-engine") read_copy_engine(j, s, c);
  c.utilisation.push_back(std::move(s));
}

// `aiscale bench vision` on GPUs: a CNN's utilisation of the dense peak, from the
// training FLOPs per image (6 × multiply-adds, as the planner counts them) and the images
// per second of one GPU. CPU runs and unknown devices are noted and left out.
void read_vision(const json& j, const std::string& where, const Catalog& cat, Calibration& c) {
  if (text(j, "device") != "cuda") {
    c.notes.push_back(where + ": a CPU vision result; the planner's CPU partitions calibrate "
                      "from language results only; not used");
    return;
  }
  MfuSample s;
  s.cnn = true;
  s.device = need(j, "gpu", where).get<std::string>();
  if (!match_accelerator(s, where, cat, c)) return;
  const std::string precision = text(j, "precision");
  if (!set_precision(s, precision == "fp32" && j.value("tf32", false) ? "tf32" : precision,
                     precision, where, c))
    return;
  s.model = text(j, "model");
  s.date = text(j, "date");
  s.n_params = static_cast<int64_t>(need_number(j, "parameters", where));
  s.world_size = static_cast<int>(number_or(j, "world_size", 1));
  s.achieved_tflops = need_number(j, "train_flops_per_image", where) *
                      need_number(j, "images_per_s_per_rank", where) / 1e12;
  s.step_spread = step_spread_of(j);
  const Accelerator* acc = cat.find_accelerator(s.accelerator_id);
  if (!set_utilisation(s, *acc, where, c)) return;
  s.source = where;
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
        else if (text(j, "bench") == "vision") read_vision(j, where, cat, c);
        else c.notes.push_back(fmt::format("{}: benchmark '{}' not used for calibration", where, bench));
      }
    }
  return c;
}

const MfuSample* Calibration::closest_utilisation(std::string_view accel, Precision p,
                                                  int64_t n_params, bool cnn,
                                                  std::string_view family) const {
  // Runs of the same family first, then one-GPU runs: a multi-GPU step also holds its
  // communication, which the model prices on its own, so such a run stands in only where
  // no 1-GPU run exists.
  bool family_measured = false;
  for (const auto& s : utilisation)
    family_measured = family_measured || (s.accelerator_id == accel && s.precision == p &&
                                          s.cnn == cnn && !family.empty() && s.family == family);
  const MfuSample* best = nullptr;
  bool best_multi = false;
  double best_dist = 0;
  for (const auto& s : utilisation) {
    if (s.accelerator_id != accel || s.precision != p || s.cnn != cnn) continue;
    if (family_measured && s.family != family) continue;
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

}  // namespace aiscale::plan
