#include "aiscale/sweep/reference_check.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <toml++/toml.h>

#include "aiscale/core/error.h"

namespace aiscale::sweep {

const std::vector<std::string>& reference_metrics() {
  static const std::vector<std::string> m = {"throughput_per_device", "throughput_total",
                                             "step_time_median_s",    "speedup",
                                             "efficiency",            "mfu",
                                             "tflops_per_device"};
  return m;
}

std::vector<Reference> load_references(const std::string& path) {
  if (!std::filesystem::is_regular_file(path))
    fail("--reference {}: no such file: give a TOML file of [[reference]] entries "
         "(docs/guide/scaling.md#reference-values)", path);
  toml::table root;
  try {
    root = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    fail("{}:{}:{}: malformed TOML: {}", path, e.source().begin.line, e.source().begin.column, e.description());
  }
  for (const auto& [key, node] : root)
    if (key.str() != "reference")
      fail("{}: unknown key '{}': the file holds [[reference]] entries only", path, key.str());
  const toml::array* entries = root["reference"].as_array();
  if (!entries || entries->empty())
    fail("{}: no [[reference]] entry: give at least one (n, metric, value and a bound)", path);
  std::vector<Reference> out;
  for (size_t i = 0; i < entries->size(); ++i) {
    const toml::table* t = (*entries)[i].as_table();
    const std::string where = fmt::format("{}: reference {}", path, i + 1);
    if (!t) fail("{}: must be a table ([[reference]])", where);
    for (const auto& [key, node] : *t) {
      const std::string k(key.str());
      if (k != "n" && k != "metric" && k != "value" && k != "lower" && k != "upper" && k != "series")
        fail("{}: unknown key '{}': keys are n, metric, value, lower, upper, series", where, k);
    }
    Reference r;
    const auto n = (*t)["n"].value_exact<int64_t>();
    if (!n || *n < 1 || *n > (int64_t{1} << 24)) fail("{}: n must be the rank count of a point (an integer >= 1)", where);
    r.n = static_cast<int>(*n);
    r.metric = (*t)["metric"].value_or(std::string());
    const auto& metrics = reference_metrics();
    if (std::find(metrics.begin(), metrics.end(), r.metric) == metrics.end())
      fail("{}: metric '{}' is unknown: choose one of {}", where, r.metric, fmt::join(metrics, ", "));
    const auto value = (*t)["value"].value<double>();
    if (!value || !std::isfinite(*value) || *value <= 0) fail("{}: value must be a positive number", where);
    r.value = *value;
    if (auto lower = (*t)["lower"].value<double>()) {
      if (!std::isfinite(*lower) || *lower > 0 || *lower < -1)
        fail("{}: lower = {} must lie in [-1, 0] (a relative bound: -0.05 is 5 % below value)", where, *lower);
      r.has_lower = true, r.lower = *lower;
    }
    if (auto upper = (*t)["upper"].value<double>()) {
      if (!std::isfinite(*upper) || *upper < 0)
        fail("{}: upper = {} must be 0 or more (a relative bound: 0.1 is 10 % above value)", where, *upper);
      r.has_upper = true, r.upper = *upper;
    }
    if (!r.has_lower && !r.has_upper) fail("{}: give lower, upper or both: a value without bounds checks nothing", where);
    r.series = (*t)["series"].value_or(std::string());
    out.push_back(r);
  }
  return out;
}

namespace {

// A point's figure: a number, or the median of a {median, min, max} object; NaN if absent.
double figure(const nlohmann::json& point, const std::string& metric) {
  if (!point.contains(metric)) return NAN;
  const nlohmann::json& v = point[metric];
  if (v.is_number()) return v.get<double>();
  if (v.is_object() && v.contains("median") && v["median"].is_number()) return v["median"].get<double>();
  return NAN;
}

}  // namespace

nlohmann::json check_references(const std::vector<Reference>& refs, const nlohmann::json& a) {
  nlohmann::json rows = nlohmann::json::array();
  // What a row says of its reference, whatever it found.
  auto row_of = [](const Reference& r, const std::string& series) {
    return nlohmann::json{{"series", series}, {"n", r.n}, {"metric", r.metric}, {"value", r.value},
                          {"lower", r.has_lower ? nlohmann::json(r.lower) : nlohmann::json(nullptr)},
                          {"upper", r.has_upper ? nlohmann::json(r.upper) : nlohmann::json(nullptr)}};
  };
  for (const Reference& r : refs) {
    bool matched = false;
    for (const auto& s : a.value("series", nlohmann::json::array())) {
      const std::string label = s.value("label", "");
      if (!r.series.empty() && label != r.series) continue;
      for (const auto& p : s.value("points", nlohmann::json::array())) {
        if (p.value("n", 0) != r.n) continue;
        matched = true;
        const double m = figure(p, r.metric);
        nlohmann::json row = row_of(r, label);
        if (!std::isfinite(m)) {
          row["measured"] = nullptr;
          row["pass"] = false;
          row["why"] = fmt::format("the point has no {} (not measured on this device)", r.metric);
        } else {
          row["measured"] = m;
          const bool low_ok = !r.has_lower || m >= r.value * (1 + r.lower);
          const bool high_ok = !r.has_upper || m <= r.value * (1 + r.upper);
          row["pass"] = low_ok && high_ok;
          row["why"] = low_ok && high_ok ? ""
                       : !low_ok ? fmt::format("{:.4g} is {:.1f} % below the reference (allowed {:.1f} %)", m,
                                               100 * (1 - m / r.value), -100 * r.lower)
                                 : fmt::format("{:.4g} is {:.1f} % above the reference (allowed {:.1f} %)", m,
                                               100 * (m / r.value - 1), 100 * r.upper);
        }
        rows.push_back(row);
      }
    }
    if (!matched) {
      nlohmann::json row = row_of(r, r.series);
      row["measured"] = nullptr;
      row["pass"] = false;
      row["why"] = r.series.empty() ? fmt::format("no point of {} rank(s) was measured", r.n)
                                    : fmt::format("series '{}' has no point of {} rank(s)", r.series, r.n);
      rows.push_back(row);
    }
  }
  return rows;
}

}  // namespace aiscale::sweep
