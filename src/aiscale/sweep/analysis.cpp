#include "aiscale/sweep/analysis.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>

#include <fmt/format.h>

#include "aiscale/core/error.h"
#include "aiscale/core/fs.h"
#include "aiscale/core/log.h"
#include "aiscale/core/stats.h"
#include "aiscale/nn/models/gpt_config.h"
#include "aiscale/profile/device_info.h"
#include "aiscale/sweep/point.h"
#include "aiscale/sweep/reference_check.h"
#include "aiscale/sweep/statistics.h"
#include "aiscale/sweep/study_dir.h"
#include "aiscale/train/config.h"

namespace aiscale::sweep {
namespace fs = std::filesystem;
namespace {


// What one repeat of one point measured.
struct PointResult {
  std::string id, precision;
  int n = 0, repeat = 0;
  double step_time_s = 0;            // median time per global batch
  double per_device = 0;             // tokens/s per device
  std::optional<double> tflops, mfu;
  std::optional<double> epoch_per_device, train_per_device;  // samples/s per device
  std::optional<double> peak_memory, power_w, sm_clock_mhz, gpu_utilization_pct;
  std::vector<double> step_times;    // measured, for the CDF
  std::optional<StepSplit> split;    // compute / communication / data wait
  std::vector<Straggler> stragglers;
  std::vector<int64_t> loss_steps;
  std::vector<double> losses;
  std::string device;
};

std::optional<double> mean_event(const RunRecords& r, const std::string& event, const std::string& field) {
  double sum = 0;
  int k = 0;
  for (const auto& e : r.events)
    if (e.value("event", "") == event && e.value("measured", 1.0) > 0 && e.contains(field)) {
      sum += e[field].get<double>();
      ++k;
    }
  if (k == 0) return std::nullopt;
  return sum / k;
}

std::optional<double> max_event(const RunRecords& r, const std::string& event, const std::string& field) {
  std::optional<double> m;
  for (const auto& e : r.events)
    if (e.value("event", "") == event && e.contains(field)) m = std::max(m.value_or(0.0), e[field].get<double>());
  return m;
}

PointResult measure_point(const fs::path& pd, const nlohmann::json& p, const Window& w,
                          const std::string& device_kind) {
  PointResult r;
  r.id = p.value("id", "");
  r.precision = p.value("precision", "");
  r.n = p.value("ranks", 1);
  r.repeat = p.value("repeat", 1);
  const fs::path run = pd / "run";
  const RunRecords rec = read_step_records((run / "steps.jsonl").string());
  r.step_times = global_step_times(rec, w);
  if (r.step_times.empty())
    fail("no measured steps: the window holds none that are not warm-up or an epoch's first or last batch");
  r.step_time_s = median(r.step_times);
  r.per_device = double(tokens_per_rank_step(rec, w)) / r.step_time_s;
  r.epoch_per_device = epoch_throughput_per_device(rec, w, "wall");
  r.train_per_device = epoch_throughput_per_device(rec, w, "train");
  r.stragglers = find_stragglers(rank_median_busy_times(rec, w));
  r.split = step_split(rec, w);
  r.peak_memory = max_event(rec, "memory", "peak_memory_bytes");
  r.power_w = mean_event(rec, "gpu_power", "mean_power_w");
  r.sm_clock_mhz = mean_event(rec, "gpu_power", "mean_sm_clock_mhz");
  r.gpu_utilization_pct = mean_event(rec, "gpu_power", "mean_gpu_utilization_pct");
  const int first_rank = rec.steps.empty() ? 0 : rec.steps.front().rank;
  for (const auto& s : rec.steps)
    if (s.rank == first_rank) {
      r.loss_steps.push_back(s.step);
      r.losses.push_back(s.loss);
    }
  double flops_per_token = 0;
  if (fs::exists(run / "bench.jsonl")) {
    auto j = nlohmann::json::parse(read_file((run / "bench.jsonl").string()));
    flops_per_token = j.value("flops_per_token", 0.0);
    r.device = j.value("device", "");
  } else {
    const train::TrainConfig c = train::load_train_config((run / "config.toml").string(), {});
    flops_per_token = nn::gpt_train_flops_per_token(c.model, c.seq_len);
    if (fs::exists(run / "summary.json"))
      r.device = nlohmann::json::parse(read_file((run / "summary.json").string())).value("device", "");
  }
  if (flops_per_token > 0) {
    r.tflops = tflops(r.per_device, flops_per_token);
    if (device_kind == "gpu") r.mfu = mfu(*r.tflops, profile::gpu_dense_bf16_peak_tflops(r.device));
  }
  return r;
}

std::vector<double> values_of(const std::vector<const PointResult*>& v, double PointResult::*f) {
  std::vector<double> out;
  for (const auto* r : v) out.push_back(r->*f);
  return out;
}

std::optional<Spread> spread_opt(const std::vector<const PointResult*>& v,
                                 std::optional<double> PointResult::*f) {
  std::vector<double> out;
  for (const auto* r : v)
    if (r->*f) out.push_back(*(r->*f));
  if (out.empty()) return std::nullopt;
  return spread_of(out);
}

nlohmann::json spread_json(const std::optional<Spread>& s) { return s ? to_json(*s) : nlohmann::json(); }

// One series (one precision) from its repeats, by count.
nlohmann::json make_series(const std::string& label, const std::string& source, const std::string& precision,
                           const std::string& kind, const std::vector<PointResult>& results,
                           nlohmann::json& cdf) {
  std::map<int, std::vector<const PointResult*>> by_n;
  for (const auto& r : results) by_n[r.n].push_back(&r);
  nlohmann::json points = nlohmann::json::array();
  std::vector<int> counts;
  std::vector<double> times;
  int n0 = 0;
  double t0 = 0, dev0 = 0, ep0 = 0, tr0 = 0;
  for (const auto& [n, reps] : by_n) {
    const double t = median(values_of(reps, &PointResult::step_time_s));
    const Spread dev = spread_of(values_of(reps, &PointResult::per_device));
    const auto ep = spread_opt(reps, &PointResult::epoch_per_device);
    const auto tr = spread_opt(reps, &PointResult::train_per_device);
    if (n0 == 0) {
      n0 = n;
      t0 = t;
      dev0 = dev.median;
      ep0 = ep ? ep->median : 0;
      tr0 = tr ? tr->median : 0;
    }
    counts.push_back(n);
    times.push_back(t);
    const bool strong = kind == "strong";
    nlohmann::json pt;
    pt["n"] = n;
    pt["repeats"] = reps.size();
    pt["throughput_per_device"] = to_json(dev);
    pt["throughput_total"] = to_json(Spread{dev.median * n, dev.min * n, dev.max * n});
    pt["tflops_per_device"] = spread_json(spread_opt(reps, &PointResult::tflops));
    pt["mfu"] = spread_json(spread_opt(reps, &PointResult::mfu));
    pt["step_time_median_s"] = t;
    pt["step_time_s"] = to_json(spread_of(values_of(reps, &PointResult::step_time_s)));
    // The split of the repeats' steps: the mean of their splits.
    StepSplit split;
    int with_split = 0;
    for (const auto* r : reps)
      if (r->split) {
        split.compute_s += r->split->compute_s;
        split.communication_s += r->split->communication_s;
        split.data_wait_s += r->split->data_wait_s;
        split.steps += r->split->steps;
        ++with_split;
      }
    if (with_split > 0) {
      split.compute_s /= with_split;
      split.communication_s /= with_split;
      split.data_wait_s /= with_split;
      pt["step_split"] = to_json(split);
    } else {
      pt["step_split"] = nullptr;
    }
    pt["speedup"] = strong ? speedup(t0, t) : weak_speedup(dev0, n0, dev.median, n);
    pt["efficiency"] = strong ? strong_efficiency(t0, n0, t, n) : throughput_ratio(dev0, dev.median);
    pt["per_device_throughput_ratio"] = throughput_ratio(dev0, dev.median);
    if (strong) {
      pt["weak_efficiency"] = nullptr;
    } else {
      pt["weak_efficiency"] = {
          {"epoch", ep && ep0 > 0 ? nlohmann::json(throughput_ratio(ep0, ep->median)) : nlohmann::json()},
          {"train", tr && tr0 > 0 ? nlohmann::json(throughput_ratio(tr0, tr->median)) : nlohmann::json()},
          {"median_batch", throughput_ratio(dev0, dev.median)}};
    }
    auto peak = spread_opt(reps, &PointResult::peak_memory);
    pt["peak_memory_bytes"] = peak ? nlohmann::json(peak->max) : nlohmann::json();
    auto power = spread_opt(reps, &PointResult::power_w);
    pt["power_w"] = power ? nlohmann::json(power->median) : nlohmann::json();
    auto clock = spread_opt(reps, &PointResult::sm_clock_mhz);
    pt["sm_clock_mhz"] = clock ? nlohmann::json(clock->median) : nlohmann::json();
    auto util = spread_opt(reps, &PointResult::gpu_utilization_pct);
    pt["gpu_utilization_pct"] = util ? nlohmann::json(util->median) : nlohmann::json();
    nlohmann::json stragglers = nlohmann::json::array();
    std::vector<double> pooled;
    for (const auto* r : reps) {
      for (const auto& s : r->stragglers)
        stragglers.push_back({{"rank", s.rank}, {"median_step_s", s.median_step_s},
                              {"slower_by", s.slower_by}, {"repeat", r->repeat}});
      pooled.insert(pooled.end(), r->step_times.begin(), r->step_times.end());
    }
    pt["stragglers"] = stragglers;
    points.push_back(pt);
    std::sort(pooled.begin(), pooled.end());
    cdf.push_back({{"label", label}, {"n", n}, {"step_times_s", pooled}});
  }
  nlohmann::json amdahl;
  if (kind == "strong")
    if (auto f = fit_amdahl(counts, times)) {
      amdahl = {{"serial_fraction", f->serial_fraction}, {"residual_rms", f->residual_rms},
                {"residual_rms_relative", f->residual_rms_relative}, {"fitted_t1_s", f->t1},
                {"rank_counts", f->counts}};
      // Two rank counts determine the curve: its residuals are 0 by construction, which
      // says nothing of how well Amdahl's law describes the series.
      if (f->counts < 3) {
        amdahl["residual_rms"] = nullptr;
        amdahl["residual_rms_relative"] = nullptr;
        amdahl["note"] = "2 rank counts determine the curve exactly: no fit quality; measure a third";
      }
    }
  return {{"label", label}, {"source", source}, {"precision", precision}, {"points", points}, {"amdahl", amdahl}};
}

}  // namespace

nlohmann::json analyze_study(const std::string& dir, bool write_cache) {
  const nlohmann::json index = read_study_index(dir);
  const std::string kind = index.value("kind", "strong");
  const std::string device_kind = index.value("device", "cpu") == "cuda" ? "gpu" : "cpu";
  const auto& m = index.value("measure", nlohmann::json::object());
  Window w;
  if (m.value("epochs", 0) > 0) {
    w.epoch = m.value("epoch", 1) - 1;
  } else {
    w.first_step = m.value("first_step", int64_t{1});
    w.last_step = m.value("last_step", std::numeric_limits<int64_t>::max());
  }
  nlohmann::json failed = nlohmann::json::array(), pending = nlohmann::json::array();
  std::map<std::string, std::vector<PointResult>> by_precision;
  std::string device;
  for (const auto& p : index["points"]) {
    const fs::path pd = fs::path(dir) / p.value("dir", "");
    const PointStatus st = point_status(pd.string());
    if (st.state == "failed") {
      failed.push_back({{"id", p.value("id", "")}, {"reason", st.reason}});
      continue;
    }
    if (st.state != "finished") {
      pending.push_back({{"id", p.value("id", "")}, {"state", st.state}});
      continue;
    }
    try {
      PointResult r = measure_point(pd, p, w, device_kind);
      if (device.empty()) device = r.device;
      by_precision[r.precision].push_back(std::move(r));
    } catch (const Error& e) {
      failed.push_back({{"id", p.value("id", "")}, {"reason", std::string("analysis: ") + e.what()}});
    }
  }
  nlohmann::json series = nlohmann::json::array(), cdf = nlohmann::json::array(),
                 losses = nlohmann::json::array();
  for (const auto& precision : index.value("precisions", std::vector<std::string>{})) {
    auto it = by_precision.find(precision);
    if (it == by_precision.end()) continue;
    const std::string label = "aiscale " + precision;
    series.push_back(make_series(label, "aiscale", precision, kind, it->second, cdf));
    for (const auto& r : it->second)
      losses.push_back({{"label", label}, {"n", r.n}, {"repeat", r.repeat}, {"step", r.loss_steps}, {"loss", r.losses}});
  }
  const auto& env = index.value("environment", nlohmann::json::object());
  nlohmann::json a = {
      {"format", "aiscale-study-analysis"},
      {"version", 1},
      {"study", {{"name", index.value("name", "")}, {"dir", fs::absolute(dir).lexically_normal().string()},
                 {"kind", kind}, {"workload", index.value("workload_text", "")}, {"unit", "tokens/s"},
                 {"created", index.value("created", "")}, {"command", index.value("command", "")},
                 {"study_id", index.value("study_id", "")}}},
      {"environment", {{"host", env.value("host", "")}, {"device", device.empty() ? env.value("cpu", "") : device},
                       {"device_kind", device_kind}, {"aiscale_version", index.value("aiscale_version", "")},
                       {"date", index.value("created", "")},
                       {"software", {{"aiscale", index.value("aiscale_version", "")},
                                     {"compiler", env.value("compiler", "")}}}}},
      {"series", series},
      {"cdf", cdf},
      {"loss_curves", losses},
      {"failed_points", failed},
      {"pending_points", pending}};
  // Reference values kept with the study (aiscale scale --reference): checked at every
  // analysis, so a report of the study shows them.
  if (const fs::path refs = fs::path(dir) / "reference.toml"; fs::exists(refs))
    a["references"] = check_references(load_references(refs.string()), a);
  if (write_cache) {
    try {
      atomic_write_file((fs::path(dir) / "analysis.json").string(), a.dump(2) + "\n");
    } catch (const Error& e) {
      log::warn("analysis.json not written: {}", e.what());
    }
  }
  return a;
}

nlohmann::json analyze_jsonl(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail("comparison file '{}' does not exist", path);
  struct Key {
    std::string label, precision;
    bool operator<(const Key& o) const { return std::tie(label, precision) < std::tie(o.label, o.precision); }
  };
  std::map<Key, std::vector<PointResult>> groups;
  std::map<Key, std::string> sources;
  std::string line, device;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      auto j = nlohmann::json::parse(line);
      PointResult r;
      const std::string source = j.at("source").get<std::string>();
      r.n = j.at("world_size").get<int>();
      r.precision = j.at("precision").get<std::string>();
      r.per_device = j.at("tokens_per_s_per_device").get<double>();
      r.step_times = j.value("step_times_s", std::vector<double>{});
      r.repeat = j.value("repeat", 1);
      if (r.n < 1 || r.per_device <= 0) fail("world_size and tokens_per_s_per_device must be positive");
      r.step_time_s = r.step_times.empty() ? 0.0 : median(r.step_times);
      if (j.contains("tflops_per_device")) r.tflops = j["tflops_per_device"].get<double>();
      if (j.contains("mfu")) r.mfu = j["mfu"].get<double>();
      if (device.empty()) device = j.value("device", "");
      std::sort(r.step_times.begin(), r.step_times.end());
      Key k{j.value("label", source + " " + r.precision), r.precision};
      sources[k] = source;
      groups[k].push_back(std::move(r));
    } catch (const nlohmann::json::exception& e) {
      fail("'{}' line {}: {} — each line must be a JSON object with source, world_size, precision, "
           "tokens_per_s_per_device (and optionally step_times_s); see docs/guide/scaling.md", path, line_no, e.what());
    } catch (const Error& e) {
      fail("'{}' line {}: {}", path, line_no, e.what());
    }
  }
  if (groups.empty()) fail("comparison file '{}' holds no JSON lines", path);
  nlohmann::json series = nlohmann::json::array(), cdf = nlohmann::json::array();
  // Throughput-based: with a fixed global batch the total-throughput ratio is T(n0)/T(n),
  // so these are the strong formulas too.
  for (const auto& [k, results] : groups)
    series.push_back(make_series(k.label, sources[k], k.precision, "weak", results, cdf));
  for (auto& s : series)
    for (auto& p : s["points"]) p["weak_efficiency"] = nullptr;
  return {{"format", "aiscale-study-analysis"},
          {"version", 1},
          {"study", {{"name", fs::path(path).stem().string()}, {"dir", fs::absolute(path).string()},
                     {"kind", "weak"}, {"workload", "comparison JSON lines"}, {"unit", "tokens/s"},
                     {"created", ""}, {"command", ""}}},
          {"environment", {{"host", ""}, {"device", device}, {"device_kind", ""}, {"aiscale_version", ""},
                           {"date", ""}, {"software", nlohmann::json::object()}}},
          {"series", series},
          {"cdf", cdf},
          {"loss_curves", nlohmann::json::array()},
          {"failed_points", nlohmann::json::array()}};
}

}  // namespace aiscale::sweep
