#include "aiscale/sweep/statistics.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "aiscale/core/error.h"
#include "aiscale/core/stats.h"

namespace aiscale::sweep {

RunRecords read_step_records(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail("step records '{}' are missing: the run did not finish (see its log.txt)", path);
  RunRecords r;
  std::vector<std::string> lines;
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) lines.push_back(line);
  std::set<int> ranks;
  for (size_t i = 0; i < lines.size(); ++i) {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(lines[i]);
    } catch (const nlohmann::json::exception& e) {
      if (i + 1 == lines.size()) break;  // the last line, cut by a crash
      fail("'{}' line {} is not JSON ({}): the file is damaged; run the point again", path, i + 1, e.what());
    }
    try {
      if (j.contains("event")) {
        if (j["event"] == "epoch") {
          r.epochs.push_back({j.at("epoch").get<int64_t>(), j.value("first_step", int64_t{0}),
                              j.value("last_step", int64_t{0}), j.at("wall_s").get<double>(),
                              j.at("train_s").get<double>(), j.at("val_s").get<double>(),
                              j.value("complete", false)});
        } else {
          r.events.push_back(j);
        }
        continue;
      }
      StepRow s;
      s.rank = j.at("rank").get<int>();
      s.step = j.at("step").get<int64_t>();
      s.epoch = j.value("epoch", int64_t{0});
      s.step_time_s = j.at("step_time_s").get<double>();
      s.data_wait_s = j.value("data_wait_s", 0.0);
      s.sync_s = j.value("sync_s", 0.0);
      s.loss = j.value("loss", 0.0);
      s.tokens = j.value("tokens", int64_t{0});
      s.samples = j.value("samples", int64_t{0});
      s.first_in_epoch = j.value("first_in_epoch", false);
      s.last_in_epoch = j.value("last_in_epoch", false);
      s.warmup = j.value("warmup", false);
      ranks.insert(s.rank);
      r.steps.push_back(s);
    } catch (const nlohmann::json::exception& e) {
      fail("'{}' line {} lacks a field of a step record ({}): see docs/guide/scaling.md for the format",
           path, i + 1, e.what());
    }
  }
  r.world = static_cast<int>(ranks.size());
  return r;
}

bool Window::contains(const StepRow& r) const {
  if (r.step < first_step || r.step > last_step || r.warmup) return false;
  if (epoch >= 0 && r.epoch != epoch) return false;
  if (leave_out_epoch_edges && (r.first_in_epoch || r.last_in_epoch)) return false;
  return true;
}

std::vector<double> global_step_times(const RunRecords& r, const Window& w) {
  std::map<int64_t, double> slowest;
  for (const auto& s : r.steps)
    if (w.contains(s)) {
      auto [it, fresh] = slowest.emplace(s.step, s.step_time_s);
      if (!fresh) it->second = std::max(it->second, s.step_time_s);
    }
  std::vector<double> out;
  out.reserve(slowest.size());
  for (const auto& [step, t] : slowest) out.push_back(t);
  return out;
}

std::vector<double> rank_median_busy_times(const RunRecords& r, const Window& w) {
  std::map<int, std::vector<double>> busy;
  for (const auto& s : r.steps)
    if (w.contains(s)) busy[s.rank].push_back(std::max(0.0, s.step_time_s - s.sync_s));
  std::vector<double> out;
  for (const auto& [rank, times] : busy) {
    if (static_cast<size_t>(rank) >= out.size()) out.resize(rank + 1, 0.0);
    out[rank] = median(times);
  }
  return out;
}

std::optional<StepSplit> step_split(const RunRecords& r, const Window& w) {
  std::map<int64_t, const StepRow*> slowest;
  for (const auto& s : r.steps)
    if (w.contains(s)) {
      auto [it, fresh] = slowest.emplace(s.step, &s);
      if (!fresh && s.step_time_s > it->second->step_time_s) it->second = &s;
    }
  if (slowest.empty()) return std::nullopt;
  StepSplit out;
  for (const auto& [step, row] : slowest) {
    const double wait = std::clamp(row->data_wait_s, 0.0, row->step_time_s);
    const double comm = std::clamp(row->sync_s, 0.0, row->step_time_s - wait);
    out.data_wait_s += wait;
    out.communication_s += comm;
    out.compute_s += row->step_time_s - wait - comm;
  }
  out.steps = static_cast<int64_t>(slowest.size());
  const double k = static_cast<double>(out.steps);
  out.data_wait_s /= k;
  out.communication_s /= k;
  out.compute_s /= k;
  return out;
}

nlohmann::json to_json(const StepSplit& s) {
  return {{"compute_s", s.compute_s}, {"communication_s", s.communication_s},
          {"data_wait_s", s.data_wait_s}, {"steps", s.steps}};
}

int64_t tokens_per_rank_step(const RunRecords& r, const Window& w) {
  for (const auto& s : r.steps)
    if (w.contains(s)) return s.tokens;
  return 0;
}

int64_t samples_per_rank_step(const RunRecords& r, const Window& w) {
  for (const auto& s : r.steps)
    if (w.contains(s)) return s.samples;
  return 0;
}

Spread spread_of(const std::vector<double>& v) {
  if (v.empty()) return {};
  const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  return {median(v), *lo, *hi};
}

nlohmann::json to_json(const Spread& s) { return {{"median", s.median}, {"min", s.min}, {"max", s.max}}; }

double speedup(double time_base, double time_n) { return time_n > 0 ? time_base / time_n : 0.0; }

double strong_efficiency(double time_base, int n_base, double time_n, int n) {
  return n > 0 ? speedup(time_base, time_n) * n_base / n : 0.0;
}

double throughput_ratio(double per_device_base, double per_device_n) {
  return per_device_base > 0 ? per_device_n / per_device_base : 0.0;
}

double weak_speedup(double per_device_base, int n_base, double per_device_n, int n) {
  return n_base > 0 ? throughput_ratio(per_device_base, per_device_n) * n / n_base : 0.0;
}

std::optional<double> epoch_throughput_per_device(const RunRecords& r, const Window& w, const std::string& use) {
  double seconds = 0;
  int64_t samples = 0;
  bool any = false;
  const int first_rank = r.steps.empty() ? 0 : r.steps.front().rank;
  for (const auto& e : r.epochs) {
    if (!e.complete) continue;
    const bool in = w.epoch >= 0 ? e.epoch == w.epoch
                                 : e.first_step >= w.first_step && e.last_step <= w.last_step;
    if (!in) continue;
    any = true;
    seconds += use == "train" ? e.train_s : e.wall_s;
    for (const auto& s : r.steps)
      if (s.rank == first_rank && s.step >= e.first_step && s.step <= e.last_step) samples += s.samples;
  }
  if (!any || seconds <= 0) return std::nullopt;
  return static_cast<double>(samples) / seconds;
}

double tflops(double tokens_per_s, double flops_per_token) { return tokens_per_s * flops_per_token / 1e12; }

std::optional<double> mfu(double achieved_tflops, double peak_tflops) {
  if (peak_tflops <= 0) return std::nullopt;
  return achieved_tflops / peak_tflops;
}

std::optional<AmdahlFit> fit_amdahl(const std::vector<int>& counts, const std::vector<double>& times) {
  const size_t k = std::min(counts.size(), times.size());
  const size_t distinct = std::set<int>(counts.begin(), counts.begin() + k).size();
  if (distinct < 2) return std::nullopt;
  double mx = 0, mt = 0;
  for (size_t i = 0; i < k; ++i) {
    mx += 1.0 / counts[i];
    mt += times[i];
  }
  mx /= double(k);
  mt /= double(k);
  double sxx = 0, sxt = 0;
  for (size_t i = 0; i < k; ++i) {
    const double dx = 1.0 / counts[i] - mx;
    sxx += dx * dx;
    sxt += dx * (times[i] - mt);
  }
  const double b = sxt / sxx, a = mt - b * mx;
  AmdahlFit f;
  f.counts = static_cast<int>(distinct);
  f.t1 = a + b;
  f.serial_fraction = f.t1 != 0 ? a / f.t1 : 0.0;
  double ss = 0;
  for (size_t i = 0; i < k; ++i) {
    const double e = times[i] - (a + b / counts[i]);
    ss += e * e;
  }
  f.residual_rms = std::sqrt(ss / double(k));
  f.residual_rms_relative = mt > 0 ? f.residual_rms / mt : 0.0;
  return f;
}

std::vector<Straggler> find_stragglers(const std::vector<double>& rank_medians, double margin) {
  std::vector<Straggler> out;
  if (rank_medians.size() < 2) return out;
  const double m = median(rank_medians);
  if (m <= 0) return out;
  for (size_t r = 0; r < rank_medians.size(); ++r) {
    const double slower = rank_medians[r] / m - 1.0;
    if (slower > margin) out.push_back({static_cast<int>(r), rank_medians[r], slower});
  }
  return out;
}

}  // namespace aiscale::sweep
