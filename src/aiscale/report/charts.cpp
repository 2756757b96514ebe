// Vega-Lite specifications of the report's charts.
#include "aiscale/report/charts.h"
#include "aiscale/report/tune_analysis.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <set>

#include <fmt/format.h>

namespace aiscale::report {
namespace {

using nlohmann::json;

constexpr int kWidth = 420, kHeight = 260;
constexpr size_t kMaxCdfPoints = 400, kMaxLossPoints = 1500;

std::string label_of(const json& record) { return record["label"].get<std::string>(); }

// The x encoding of a rank count: log2 with a tick at each measured n, or ordinal when
// only one n is present (a log scale of one value has no extent).
json n_axis(const std::set<double>& ns) {
  if (ns.size() < 2)
    return {{"field", "n"}, {"type", "ordinal"}, {"title", "ranks n"}, {"axis", {{"labelAngle", 0}}}};
  return {{"field", "n"}, {"type", "quantitative"}, {"title", "ranks n"},
          {"scale", {{"type", "log"}, {"base", 2}}},
          {"axis", {{"values", json(std::vector<double>(ns.begin(), ns.end()))}, {"format", "d"}}}};
}

json base_spec(json values) {
  return {{"width", kWidth}, {"height", kHeight}, {"data", {{"values", std::move(values)}}},
          {"config", {{"legend", {{"orient", "bottom"}, {"columns", 2}, {"labelLimit", 230}}}}}};
}

json color(const char* field, const char* title) {
  return {{"field", field}, {"type", "nominal"}, {"title", title}};
}

json tooltip(std::initializer_list<std::pair<const char*, const char*>> fields) {
  json t = json::array();
  for (auto [field, type] : fields) t.push_back({{"field", field}, {"type", type}});
  return t;
}

// Rank counts of series with at least two of them (scaling charts need a curve).
std::set<double> scaling_ns(const std::vector<json>& studies) {
  std::set<double> all;
  for (const json& d : studies)
    for (const json& s : d["series"]) {
      std::set<double> mine;
      for (const json& p : s["points"]) mine.insert(p["n"].get<double>());
      if (mine.size() >= 2) all.insert(mine.begin(), mine.end());
    }
  return all;
}

std::optional<Chart> efficiency_chart(const std::vector<json>& studies) {
  const std::set<double> ns = scaling_ns(studies);
  if (ns.size() < 2) return std::nullopt;
  json rows = json::array();
  const std::pair<const char*, const char*> timings[] = {
      {"epoch", "full epoch"}, {"train", "training part"}, {"median_batch", "median batch"}};
  for (const json& d : studies)
    for (const json& s : d["series"])
      for (const json& p : s["points"]) {
        const json& w = p["weak_efficiency"];
        if (w.is_object())
          for (auto [key, name] : timings)
            if (w[key].is_number())
              rows.push_back({{"n", p["n"]}, {"efficiency", w[key]}, {"series", s["label"]}, {"timing", name}});
        if (p["efficiency"].is_number())
          rows.push_back({{"n", p["n"]}, {"efficiency", p["efficiency"]}, {"series", s["label"]},
                          {"timing", w.is_object() ? "throughput per device" : "throughput"}});
      }
  if (rows.empty()) return std::nullopt;
  json spec = base_spec(rows);
  spec["layer"] = json::array(
      {{{"mark", {{"type", "line"}, {"point", true}}},
        {"encoding", {{"x", n_axis(ns)},
                      {"y", {{"field", "efficiency"}, {"type", "quantitative"}, {"title", "parallel efficiency E(n)"},
                             {"scale", {{"domainMin", 0}}}}},
                      {"color", color("series", "series")},
                      {"strokeDash", color("timing", "timing")},
                      {"tooltip", tooltip({{"series", "nominal"}, {"timing", "nominal"}, {"n", "quantitative"},
                                           {"efficiency", "quantitative"}})}}}},
       {{"data", {{"values", json::array({{{"ideal", 1}}})}}},
        {"mark", {{"type", "rule"}, {"color", "gray"}, {"strokeDash", {4, 4}}}},
        {"encoding", {{"y", {{"field", "ideal"}, {"type", "quantitative"}}}}}}});
  return Chart{"efficiency", "Parallel efficiency against ranks",
               "E(n) against the series' smallest n; weak-scaling studies draw the three timings "
               "(full epoch, training part, median batch) and the per-device throughput ratio. "
               "The dashed line is ideal scaling (1).",
               spec};
}

std::optional<Chart> speedup_chart(const std::vector<json>& studies) {
  const std::set<double> ns = scaling_ns(studies);
  if (ns.size() < 2) return std::nullopt;
  json rows = json::array(), ideal = json::array();
  std::set<double> starts;
  for (const json& d : studies)
    for (const json& s : d["series"]) {
      if (s["points"].size() < 2) continue;
      double n0 = 0;
      for (const json& p : s["points"])
        if (n0 == 0 || p["n"].get<double>() < n0) n0 = p["n"].get<double>();
      starts.insert(n0);
      for (const json& p : s["points"])
        if (p["speedup"].is_number())
          rows.push_back({{"n", p["n"]}, {"speedup", p["speedup"]}, {"series", s["label"]}});
    }
  if (rows.empty()) return std::nullopt;
  for (double n0 : starts)
    for (double n : ns)
      if (n >= n0) ideal.push_back({{"n", n}, {"speedup", n / n0}, {"from", n0}});
  json spec = base_spec(rows);
  spec["layer"] = json::array(
      {{{"mark", {{"type", "line"}, {"point", true}}},
        {"encoding", {{"x", n_axis(ns)},
                      {"y", {{"field", "speedup"}, {"type", "quantitative"}, {"title", "speedup S(n)"}}},
                      {"color", color("series", "series")},
                      {"tooltip", tooltip({{"series", "nominal"}, {"n", "quantitative"}, {"speedup", "quantitative"}})}}}},
       {{"data", {{"values", ideal}}},
        {"mark", {{"type", "line"}, {"color", "gray"}, {"strokeDash", {4, 4}}}},
        {"encoding", {{"x", n_axis(ns)}, {"y", {{"field", "speedup"}, {"type", "quantitative"}}},
                      {"detail", {{"field", "from"}, {"type", "nominal"}}}}}}});
  return Chart{"speedup", "Speedup against ideal",
               "S(n) against the series' smallest n; the dashed line is ideal speedup n / n₀.", spec};
}

std::optional<Chart> cdf_chart(const std::vector<json>& studies) {
  json rows = json::array();
  for (const json& d : studies)
    for (const json& c : d["cdf"]) {
      std::vector<double> times = c["step_times_s"].get<std::vector<double>>();
      std::sort(times.begin(), times.end());
      const std::string curve = fmt::format("{} · n={}", label_of(c), c["n"].dump());
      for (auto [t, f] : cdf_points(times, kMaxCdfPoints))
        rows.push_back({{"step_time_s", t}, {"fraction", f}, {"curve", curve}});
    }
  if (rows.empty()) return std::nullopt;
  json spec = base_spec(rows);
  spec["mark"] = {{"type", "line"}, {"interpolate", "step-after"}};
  spec["encoding"] = {
      {"x", {{"field", "step_time_s"}, {"type", "quantitative"}, {"title", "step time (s)"},
             {"scale", {{"zero", false}}}}},
      {"y", {{"field", "fraction"}, {"type", "quantitative"}, {"title", "fraction of steps ≤ t"}}},
      {"color", color("curve", "series · ranks")},
      {"tooltip", tooltip({{"curve", "nominal"}, {"step_time_s", "quantitative"}, {"fraction", "quantitative"}})}};
  return Chart{"cdf", "Per-batch step time distribution",
               "Cumulative distribution of step times per series and rank count, each epoch's first "
               "and last batch and warm-up steps left out. A late rise (an elbow) shows stragglers "
               "or congestion.",
               spec};
}

std::optional<Chart> throughput_chart(const std::vector<json>& studies) {
  json rows = json::array();
  std::set<std::string> units;
  std::set<double> ns;
  for (const json& d : studies)
    for (const json& s : d["series"])
      for (const json& p : s["points"]) {
        const json& t = p["throughput_per_device"];
        units.insert(d["study"]["unit"].get<std::string>());
        ns.insert(p["n"].get<double>());
        rows.push_back({{"n", p["n"]}, {"series", s["label"]}, {"source", s["source"]},
                        {"precision", s["precision"]}, {"median", t["median"]}, {"min", t["min"]},
                        {"max", t["max"]}, {"unit", d["study"]["unit"]}});
      }
  if (rows.empty()) return std::nullopt;
  const std::string title = units.size() == 1 ? "throughput per device (" + *units.begin() + ")"
                                              : "throughput per device";
  json x = {{"field", "n"}, {"type", "ordinal"}, {"title", "ranks n"}, {"axis", {{"labelAngle", 0}}}};
  json spec = base_spec(rows);
  spec["layer"] = json::array(
      {{{"mark", "bar"},
        {"encoding", {{"x", x}, {"xOffset", {{"field", "series"}}},
                      {"y", {{"field", "median"}, {"type", "quantitative"}, {"title", title}}},
                      {"color", color("series", "series (source, precision)")},
                      {"tooltip", tooltip({{"series", "nominal"}, {"source", "nominal"}, {"precision", "nominal"},
                                           {"n", "ordinal"}, {"median", "quantitative"}, {"min", "quantitative"},
                                           {"max", "quantitative"}, {"unit", "nominal"}})}}}},
       {{"mark", {{"type", "rule"}, {"color", "black"}}},
        {"encoding", {{"x", x}, {"xOffset", {{"field", "series"}}},
                      {"y", {{"field", "min"}, {"type", "quantitative"}}}, {"y2", {{"field", "max"}}}}}}});
  return Chart{"throughput", "Throughput per device by precision and source",
               "Median per-device throughput for each series (aiscale or a reference such as "
               "PyTorch, per precision); the black bar spans min to max over the repeats (over "
               "the logged steps for a single train run).",
               spec};
}

// Measured against predicted throughput per device (aiscale report --predict).
std::optional<Chart> prediction_chart(const std::vector<json>& studies) {
  json rows = json::array();
  std::set<double> ns;
  for (const json& d : studies)
    for (const json& s : d["series"])
      for (const json& p : s["points"]) {
        if (!p.contains("predicted") || !p["predicted"].contains("throughput_per_device")) continue;
        ns.insert(p["n"].get<double>());
        rows.push_back({{"n", p["n"]}, {"series", label_of(s)}, {"figure", "measured"},
                        {"throughput", p["throughput_per_device"]["median"]}, {"unit", d["study"]["unit"]}});
        rows.push_back({{"n", p["n"]}, {"series", label_of(s)},
                        {"figure", "predicted on " + p["predicted"]["target"].get<std::string>()},
                        {"throughput", p["predicted"]["throughput_per_device"]}, {"unit", d["study"]["unit"]}});
      }
  if (rows.empty()) return std::nullopt;
  json spec = base_spec(rows);
  spec["mark"] = {{"type", "line"}, {"point", true}};
  spec["encoding"] = {{"x", n_axis(ns)},
                      {"y", {{"field", "throughput"}, {"type", "quantitative"}, {"title", "throughput per device"}}},
                      {"color", color("series", "series")},
                      {"strokeDash", color("figure", "figure")},
                      {"tooltip", tooltip({{"series", "nominal"}, {"figure", "nominal"}, {"n", "quantitative"},
                                           {"throughput", "quantitative"}, {"unit", "nominal"}})}};
  return Chart{"prediction", "Measured against the planner's prediction",
               "Per-device throughput of each series as measured (solid) and as the planner predicts "
               "the same run on the partition named by --predict (dashed); the table gives the ratio.",
               spec};
}

std::optional<Chart> loss_chart(const std::vector<json>& studies) {
  json rows = json::array();
  for (const json& d : studies)
    for (const json& c : d["loss_curves"]) {
      const std::string curve = fmt::format("{} · n={}{}", label_of(c), c["n"].dump(),
                                            c["repeat"].get<double>() > 1 ? " · repeat " + c["repeat"].dump() : "");
      const size_t count = c["step"].size();
      const size_t stride = std::max<size_t>(1, (count + kMaxLossPoints - 1) / kMaxLossPoints);
      for (size_t i = 0; i < count; i += stride)
        rows.push_back({{"step", c["step"][i]}, {"loss", c["loss"][i]}, {"curve", curve}});
    }
  if (rows.empty()) return std::nullopt;
  json spec = base_spec(rows);
  spec["mark"] = "line";
  spec["encoding"] = {
      {"x", {{"field", "step"}, {"type", "quantitative"}, {"title", "step"}}},
      {"y", {{"field", "loss"}, {"type", "quantitative"}, {"title", "loss"}, {"scale", {{"zero", false}}}}},
      {"color", color("curve", "series · ranks")},
      {"tooltip", tooltip({{"curve", "nominal"}, {"step", "quantitative"}, {"loss", "quantitative"}})}};
  return Chart{"loss", "Loss curves", "Training (and validation, where measured) loss per step.", spec};
}

// Where each point's step time goes (step_split): compute, communication and data wait,
// stacked, per series and rank count. Drawn when some point has the split.
std::optional<Chart> split_chart(const std::vector<json>& studies) {
  json rows = json::array();
  for (const json& d : studies)
    for (const json& s : d["series"])
      for (const json& p : s["points"]) {
        if (!p.contains("step_split") || !p["step_split"].is_object()) continue;
        const json& x = p["step_split"];
        const std::string point = fmt::format("{} · n={}", s["label"].get<std::string>(), p["n"].dump());
        int order = 0;
        for (auto [key, part] : {std::pair{"compute_s", "compute"}, {"communication_s", "communication"},
                                 {"data_wait_s", "data wait"}})
          rows.push_back({{"point", point}, {"part", part}, {"order", order++},
                          {"ms", x.value(key, 0.0) * 1e3}});
      }
  if (rows.empty()) return std::nullopt;
  json spec = base_spec(rows);
  spec["mark"] = "bar";
  spec["encoding"] = {
      {"y", {{"field", "point"}, {"type", "nominal"}, {"title", "series · ranks"}, {"sort", nullptr}}},
      {"x", {{"field", "ms"}, {"type", "quantitative"}, {"stack", "zero"}, {"title", "mean step time (ms)"}}},
      {"color", {{"field", "part"}, {"type", "nominal"}, {"title", "part of the step"},
                 {"sort", {"compute", "communication", "data wait"}}}},
      {"order", {{"field", "order"}, {"type", "quantitative"}}},
      {"tooltip", tooltip({{"point", "nominal"}, {"part", "nominal"}, {"ms", "quantitative"}})}};
  return Chart{"split", "Where the step time goes",
               "Per point, the mean time of a measured step on the rank that ended it: in the "
               "batch source (data wait), in the trainer's host-visible all-reduces "
               "(communication; GPU ranks that reduce gradient buckets inside backward show only "
               "what the step waited for after it) and the rest (compute).",
               spec};
}

// A train run's learning rate, gradient norm and throughput per logged step, one panel each.
std::optional<Chart> training_chart(const std::vector<json>& studies) {
  json rows = json::array();
  for (const json& d : studies) {
    if (!d.contains("training_curves")) continue;
    for (const json& c : d["training_curves"]) {
      const size_t count = c["step"].size();
      const size_t stride = std::max<size_t>(1, (count + kMaxLossPoints - 1) / kMaxLossPoints);
      for (size_t i = 0; i < count; i += stride)
        for (auto [key, quantity] : {std::pair{"lr", "learning rate"}, {"grad_norm", "gradient norm"},
                                     {"tokens_per_s", "tokens/s"}})
          if (c[key][i].is_number())
            rows.push_back({{"step", c["step"][i]}, {"value", c[key][i]}, {"quantity", quantity},
                            {"curve", label_of(c)}});
    }
  }
  if (rows.empty()) return std::nullopt;
  json spec = {{"data", {{"values", rows}}},
               {"facet", {{"row", {{"field", "quantity"}, {"type", "nominal"}, {"title", nullptr},
                                   {"sort", {"learning rate", "gradient norm", "tokens/s"}}}}}},
               {"resolve", {{"scale", {{"y", "independent"}}}}},
               {"spec", {{"width", kWidth}, {"height", kHeight / 2},
                         {"mark", "line"},
                         {"encoding", {{"x", {{"field", "step"}, {"type", "quantitative"}, {"title", "step"}}},
                                       {"y", {{"field", "value"}, {"type", "quantitative"}, {"title", nullptr},
                                              {"scale", {{"zero", false}}}}},
                                       {"color", color("curve", "run")},
                                       {"tooltip", tooltip({{"quantity", "nominal"}, {"step", "quantitative"},
                                                            {"value", "quantitative"}})}}}}},
               {"config", {{"legend", {{"orient", "bottom"}}}}}};
  return Chart{"training", "Learning rate, gradient norm and throughput",
               "Per logged step of the run: the learning rate of the schedule, the gradient's "
               "norm before clipping, and the tokens per second of all ranks together.",
               spec};
}

// Power or SM clock per n: drawn only when some point measured it.
std::optional<Chart> per_n_chart(const std::vector<json>& studies, const char* key, const char* id,
                                 const char* title, const char* axis, const char* caption) {
  json rows = json::array();
  std::set<double> ns;
  for (const json& d : studies)
    for (const json& s : d["series"])
      for (const json& p : s["points"])
        if (p[key].is_number()) {
          rows.push_back({{"n", p["n"]}, {"value", p[key]}, {"series", s["label"]}});
          ns.insert(p["n"].get<double>());
        }
  if (rows.empty()) return std::nullopt;
  json spec = base_spec(rows);
  spec["mark"] = {{"type", "line"}, {"point", true}};
  spec["encoding"] = {{"x", n_axis(ns)},
                      {"y", {{"field", "value"}, {"type", "quantitative"}, {"title", axis}, {"scale", {{"zero", false}}}}},
                      {"color", color("series", "series")},
                      {"tooltip", tooltip({{"series", "nominal"}, {"n", "quantitative"}, {"value", "quantitative"}})}};
  return Chart{id, title, caption, spec};
}

}  // namespace

std::vector<std::pair<double, double>> cdf_points(const std::vector<double>& sorted, size_t max_points) {
  std::vector<std::pair<double, double>> out;
  const size_t n = sorted.size();
  if (n == 0) return out;
  const size_t keep = std::max<size_t>(2, std::min(n, max_points));
  size_t last = SIZE_MAX;
  for (size_t k = 0; k < keep; ++k) {
    const size_t i = n == 1 ? 0 : k * (n - 1) / (keep - 1);
    if (i == last) continue;
    last = i;
    out.emplace_back(sorted[i], static_cast<double>(i + 1) / static_cast<double>(n));
  }
  return out;
}

std::vector<Chart> build_charts(const std::vector<json>& studies) {
  std::vector<Chart> charts;
  for (auto chart : {efficiency_chart(studies), speedup_chart(studies), cdf_chart(studies),
                     throughput_chart(studies), prediction_chart(studies), split_chart(studies), loss_chart(studies),
                     training_chart(studies),
                     per_n_chart(studies, "power_w", "power", "Power per device", "board power (W)",
                                 "Median board power per device over the measured steps."),
                     per_n_chart(studies, "sm_clock_mhz", "clock", "SM clock per device", "SM clock (MHz)",
                                 "Median SM clock per device over the measured steps; a clock that "
                                 "drops with n points at the power cap.")})
    if (chart) charts.push_back(std::move(*chart));
  for (auto& chart : tune_charts(studies)) charts.push_back(std::move(chart));  // aiscale tune
  return charts;
}

}  // namespace aiscale::report
