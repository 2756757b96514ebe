// Per-point figures, Amdahl fits, environments and failed points as tables.
#include "aiscale/report/tables.h"

#include <cmath>

#include <fmt/format.h>

#include "aiscale/report/machine_profile_table.h"

namespace aiscale::report {
namespace {

using nlohmann::json;

const char* kDash = "—";

std::string text_of(const json& obj, const char* key) {
  if (!obj.is_object() || !obj.contains(key) || obj[key].is_null()) return kDash;
  const json& v = obj[key];
  if (v.is_string()) return v.get<std::string>().empty() ? kDash : v.get<std::string>();
  return format_figure(v);
}

std::string format_bytes(const json& v) {
  if (!v.is_number()) return kDash;
  return fmt::format("{:.3g} GiB", v.get<double>() / (1024.0 * 1024.0 * 1024.0));
}

std::string format_weak(const json& w) {
  if (!w.is_object()) return kDash;
  return fmt::format("{} / {} / {}", format_figure(w["epoch"]), format_figure(w["train"]),
                     format_figure(w["median_batch"]));
}

std::string format_stragglers(const json& list) {
  if (!list.is_array() || list.empty()) return kDash;
  std::string out;
  for (const json& s : list) {
    if (!out.empty()) out += ", ";
    out += fmt::format("rank {} (+{:.0f} %)", format_figure(s["rank"]), 100.0 * s["slower_by"].get<double>());
  }
  return out;
}

// "compute / communication / data wait" of a step in ms, from step_split.
std::string format_split(const json& p) {
  if (!p.contains("step_split") || !p["step_split"].is_object()) return kDash;
  const json& x = p["step_split"];
  return fmt::format("{:.3g} / {:.3g} / {:.3g}", x.value("compute_s", 0.0) * 1e3,
                     x.value("communication_s", 0.0) * 1e3, x.value("data_wait_s", 0.0) * 1e3);
}

Table points_table(const std::vector<json>& studies) {
  Table t{"points", "Figures per point",
          "One row per series and rank count n: medians over the repeats with (min–max); "
          "speedup and efficiency against the series' smallest n; weak-scaling efficiency "
          "from the full epoch / the training part / the median batch; the step split is the "
          "mean step of the rank that ended it: computing / in all-reduces / waiting for data.",
          {"study", "series", "n", "repeats", "throughput per device", "throughput total",
           "TFLOP/s per device", "MFU", "step time median (s)",
           "step split (ms): compute / communication / data wait", "speedup", "efficiency",
           "weak efficiency (epoch / train / median batch)", "peak memory", "power (W)",
           "SM clock (MHz)", "GPU busy (%)", "stragglers"},
          {}};
  for (const json& d : studies) {
    const std::string unit = d["study"]["unit"].get<std::string>();
    for (const json& s : d["series"])
      for (const json& p : s["points"])
        t.rows.push_back({d["study"]["display_name"].get<std::string>(), s["label"].get<std::string>(),
                          format_figure(p["n"]), format_figure(p["repeats"]),
                          format_spread(p["throughput_per_device"]) + " " + unit,
                          p["throughput_total"].is_null() ? kDash : format_spread(p["throughput_total"]) + " " + unit,
                          format_spread(p["tflops_per_device"]), format_spread(p["mfu"]),
                          format_figure(p["step_time_median_s"]), format_split(p),
                          format_figure(p["speedup"]),
                          format_figure(p["efficiency"]), format_weak(p["weak_efficiency"]),
                          format_bytes(p["peak_memory_bytes"]), format_figure(p["power_w"]),
                          format_figure(p["sm_clock_mhz"]), format_figure(p["gpu_utilization_pct"]),
                          format_stragglers(p["stragglers"])});
  }
  return t;
}

Table amdahl_table(const std::vector<json>& studies) {
  Table t{"amdahl", "Amdahl fit per series",
          "Serial fraction f fitted to the speedups, S(n) = 1 / (f + (1 − f)/n), and the RMS of "
          "the fit's residuals.",
          {"study", "series", "source", "precision", "serial fraction", "residual RMS"}, {}};
  for (const json& d : studies)
    for (const json& s : d["series"]) {
      if (s["amdahl"].is_null()) continue;
      t.rows.push_back({d["study"]["display_name"].get<std::string>(), s["label"].get<std::string>(),
                        text_of(s, "source"), text_of(s, "precision"),
                        format_figure(s["amdahl"]["serial_fraction"]),
                        s["amdahl"]["residual_rms"].is_null()
                            ? std::string("— (2 rank counts: the curve is determined, not fitted)")
                            : format_figure(s["amdahl"]["residual_rms"])});
    }
  return t;
}

Table environment_table(const std::vector<json>& studies) {
  Table t{"environment", "Environment",
          "Where and how each study was measured: the card or CPU, the software versions, the "
          "date and the command.",
          {"study", "kind", "workload", "device", "device kind", "host", "aiscale", "software",
           "date", "command", "directory"},
          {}};
  for (const json& d : studies) {
    const json& st = d["study"];
    const json& env = d["environment"];
    std::string software;
    if (env.contains("software") && env["software"].is_object())
      for (const auto& [name, version] : env["software"].items()) {
        if (!software.empty()) software += ", ";
        software += name + " " + (version.is_string() ? version.get<std::string>() : version.dump());
      }
    t.rows.push_back({st["display_name"].get<std::string>(), text_of(st, "kind"), text_of(st, "workload"),
                      text_of(env, "device"), text_of(env, "device_kind"), text_of(env, "host"),
                      text_of(env, "aiscale_version"), software.empty() ? kDash : software,
                      text_of(env, "date") == kDash ? text_of(st, "created") : text_of(env, "date"),
                      text_of(st, "command"), text_of(st, "dir")});
  }
  return t;
}

Table failed_table(const std::vector<json>& studies) {
  Table t{"failed", "Failed points", "Points that did not finish, with the reason recorded.",
          {"study", "point", "reason"}, {}};
  for (const json& d : studies)
    for (const json& f : d["failed_points"])
      t.rows.push_back({d["study"]["display_name"].get<std::string>(), f["id"].get<std::string>(),
                        text_of(f, "reason")});
  return t;
}

// ReFrame-style reference checks (sweep/reference_check.h), where a study has them.
Table reference_table(const std::vector<json>& studies) {
  Table t{"references", "Reference checks",
          "Each reference value of a study (aiscale scale --reference) against its point: pass "
          "when value × (1 + lower) ≤ measured ≤ value × (1 + upper).",
          {"study", "series", "n", "metric", "reference", "bounds", "measured", "result"}, {}};
  for (const json& d : studies) {
    if (!d.contains("references") || !d["references"].is_array()) continue;
    for (const json& r : d["references"]) {
      const auto bound = [&](const char* key, const char* sign) {
        return r.contains(key) && r[key].is_number() ? fmt::format("{}{:.1f} %", sign, 100 * std::abs(r[key].get<double>()))
                                                     : std::string();
      };
      std::string bounds = bound("lower", "−");
      const std::string up = bound("upper", "+");
      if (!up.empty()) bounds += (bounds.empty() ? "" : " / ") + up;
      const bool pass = r.value("pass", false);
      t.rows.push_back({d["study"]["display_name"].get<std::string>(), text_of(r, "series"),
                        std::to_string(r.value("n", 0)), text_of(r, "metric"), format_figure(r["value"]),
                        bounds, format_figure(r.value("measured", json())),
                        pass ? "pass" : "FAIL: " + r.value("why", std::string())});
    }
  }
  return t;
}

// The planner's prediction beside each measured point (aiscale report --predict).
Table predictions_table(const std::vector<json>& studies) {
  Table t{"predictions", "Measured against the planner",
          "For each point, the planner's prediction for the same run (model, ranks, batch, "
          "precision, layout) on the partition named by --predict, beside the measurement: the "
          "step time, the throughput per device, and the measurement over the prediction.",
          {"study", "series", "n", "predicted on", "step measured (s)", "step predicted (s)",
           "throughput per device measured", "predicted", "measured / predicted", "why not predicted"},
          {}};
  for (const json& d : studies)
    for (const json& s : d["series"])
      for (const json& p : s["points"]) {
        if (!p.contains("predicted")) continue;
        const json& pr = p["predicted"];
        const std::string unit = d["study"]["unit"].get<std::string>();
        t.rows.push_back({d["study"]["display_name"].get<std::string>(), s["label"].get<std::string>(),
                          format_figure(p["n"]), text_of(pr, "target"), format_figure(p["step_time_median_s"]),
                          format_figure(pr.value("step_time_s", json())),
                          p["throughput_per_device"].is_object()
                              ? format_figure(p["throughput_per_device"]["median"]) + " " + unit : kDash,
                          pr.contains("throughput_per_device")
                              ? format_figure(pr["throughput_per_device"]) + " " + unit : kDash,
                          format_figure(pr.value("ratio", json())), text_of(pr, "reason")});
      }
  return t;
}

// The leaderboard of each study of training runs (aiscale tune, backend "train"), best first.
Table trials_table(const std::vector<json>& studies) {
  Table t{"trials", "Trials of the training-run searches",
          "Every trial of each study of training runs, best first: finished trials by their last "
          "validation loss, then those stopped early (the later rung first), then failed ones.",
          {"study", "rank", "trial", "ended", "last step", "validation loss", "keys"}, {}};
  for (const json& d : studies) {
    if (!d.contains("tune") || d["tune"].value("kind", "") != "train") continue;
    int rank = 0;
    for (const json& tr : d["tune"]["trials"]) {
      std::string keys;
      for (const auto& [k, v] : tr["params"].items())
        keys += (keys.empty() ? "" : ", ") + k + " = " + (v.is_string() ? v.get<std::string>() : format_figure(v));
      t.rows.push_back({d["study"]["display_name"].get<std::string>(), std::to_string(++rank), text_of(tr, "trial"),
                        text_of(tr, "status"), format_figure(tr["last_step"]), format_figure(tr["val_loss"]),
                        keys.empty() ? kDash : keys});
    }
  }
  return t;
}

}  // namespace

std::string format_figure(const json& value) {
  if (!value.is_number()) return kDash;
  const double x = value.get<double>();
  if (!std::isfinite(x)) return kDash;
  if (std::abs(x) < 1000 && x != std::round(x)) return fmt::format("{:.4g}", x);
  // Whole numbers and large figures: rounded, with thousands separators (1,480,000).
  std::string digits = fmt::format("{:.0f}", std::abs(x)), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return (x < 0 && out != "0" ? "-" : "") + out;
}

std::string format_spread(const json& spread) {
  if (!spread.is_object()) return kDash;
  const std::string med = format_figure(spread["median"]), lo = format_figure(spread["min"]),
                    hi = format_figure(spread["max"]);
  if (lo == med && hi == med) return med;
  return fmt::format("{} ({}–{})", med, lo, hi);
}

std::vector<Table> build_tables(const std::vector<json>& studies) {
  std::vector<Table> tables{points_table(studies), environment_table(studies)};
  if (Table a = amdahl_table(studies); !a.rows.empty()) tables.push_back(std::move(a));
  if (Table m = machine_profile_table(studies); !m.rows.empty()) tables.push_back(std::move(m));
  if (Table r = reference_table(studies); !r.rows.empty()) tables.push_back(std::move(r));
  if (Table pr = predictions_table(studies); !pr.rows.empty()) tables.push_back(std::move(pr));
  if (Table tr = trials_table(studies); !tr.rows.empty()) tables.push_back(std::move(tr));
  tables.push_back(failed_table(studies));
  return tables;
}

}  // namespace aiscale::report
