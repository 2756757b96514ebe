// Vega-Lite specifications of the report's charts.
#include "aiscale/report/charts.h"
#include "aiscale/report/chart_texts.h"
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
  json spec = vega::spec(std::move(values), 2);
  spec["config"]["legend"]["labelLimit"] = 230;
  return spec;
}

using vega::line_with_points;
using vega::nominal;
using vega::quantitative;
using vega::tooltip;
using vega::with_mark;

// Calls f(study, series, point) for every point of every series.
template <typename F>
void for_each_point(const std::vector<json>& studies, F&& f) {
  for (const json& d : studies)
    for (const json& s : d["series"])
      for (const json& p : s["points"]) f(d, s, p);
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
  for_each_point(studies, [&](const json&, const json& s, const json& p) {
    const json& w = p["weak_efficiency"];
    if (w.is_object())
      for (auto [key, name] : timings)
        if (w[key].is_number())
          rows.push_back({{"n", p["n"]}, {"efficiency", w[key]}, {"series", s["label"]}, {"timing", name}});
    if (p["efficiency"].is_number())
      rows.push_back({{"n", p["n"]}, {"efficiency", p["efficiency"]}, {"series", s["label"]},
                      {"timing", w.is_object() ? "throughput per device" : "throughput"}});
  });
  if (rows.empty()) return std::nullopt;
  json spec = base_spec(rows);
  spec["layer"] = json::array(
      {{{"mark", line_with_points()},
        {"encoding", {{"x", n_axis(ns)},
                      {"y", quantitative("efficiency", "parallel efficiency E(n)", {{"domainMin", 0}})},
                      {"color", nominal("series", "series")},
                      {"strokeDash", nominal("timing", "timing")},
                      {"tooltip", tooltip({{"series", "nominal"}, {"timing", "nominal"}, {"n", "quantitative"},
                                           {"efficiency", "quantitative"}})}}}},
       {{"data", {{"values", json::array({{{"ideal", 1}}})}}},
        {"mark", {{"type", "rule"}, {"color", "gray"}, {"strokeDash", {4, 4}}}},
        {"encoding", {{"y", {{"field", "ideal"}, {"type", "quantitative"}}}}}}});
  return vega::chart("efficiency", spec);
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
      {{{"mark", line_with_points()},
        {"encoding", {{"x", n_axis(ns)},
                      {"y", quantitative("speedup", "speedup S(n)")},
                      {"color", nominal("series", "series")},
                      {"tooltip", tooltip({{"series", "nominal"}, {"n", "quantitative"}, {"speedup", "quantitative"}})}}}},
       {{"data", {{"values", ideal}}},
        {"mark", {{"type", "line"}, {"color", "gray"}, {"strokeDash", {4, 4}}}},
        {"encoding", {{"x", n_axis(ns)}, {"y", {{"field", "speedup"}, {"type", "quantitative"}}},
                      {"detail", {{"field", "from"}, {"type", "nominal"}}}}}}});
  return vega::chart("speedup", spec);
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
  const json encoding = {
      {"x", quantitative("step_time_s", "step time (s)", {{"zero", false}})},
      {"y", quantitative("fraction", "fraction of steps ≤ t")},
      {"color", nominal("curve", "series · ranks")},
      {"tooltip", tooltip({{"curve", "nominal"}, {"step_time_s", "quantitative"}, {"fraction", "quantitative"}})}};
  return with_mark("cdf", base_spec(rows), {{"type", "line"}, {"interpolate", "step-after"}},
                   encoding);
}

std::optional<Chart> throughput_chart(const std::vector<json>& studies) {
  json rows = json::array();
  std::set<std::string> units;
  std::set<double> ns;
  for_each_point(studies, [&](const json& d, const json& s, const json& p) {
    const json& t = p["throughput_per_device"];
    units.insert(d["study"]["unit"].get<std::string>());
    ns.insert(p["n"].get<double>());
    rows.push_back({{"n", p["n"]}, {"series", s["label"]}, {"source", s["source"]},
                    {"precision", s["precision"]}, {"median", t["median"]}, {"min", t["min"]},
                    {"max", t["max"]}, {"unit", d["study"]["unit"]}});
  });
  if (rows.empty()) return std::nullopt;
  const std::string title = units.size() == 1 ? "throughput per device (" + *units.begin() + ")"
                                              : "throughput per device";
  json x = {{"field", "n"}, {"type", "ordinal"}, {"title", "ranks n"}, {"axis", {{"labelAngle", 0}}}};
  json spec = base_spec(rows);
  spec["layer"] = json::array(
      {{{"mark", "bar"},
        {"encoding", {{"x", x}, {"xOffset", {{"field", "series"}}},
                      {"y", quantitative("median", title)},
                      {"color", nominal("series", "series (source, precision)")},
                      {"tooltip", tooltip({{"series", "nominal"}, {"source", "nominal"}, {"precision", "nominal"},
                                           {"n", "ordinal"}, {"median", "quantitative"}, {"min", "quantitative"},
                                           {"max", "quantitative"}, {"unit", "nominal"}})}}}},
       {{"mark", {{"type", "rule"}, {"color", "black"}}},
        {"encoding", {{"x", x}, {"xOffset", {{"field", "series"}}},
                      {"y", {{"field", "min"}, {"type", "quantitative"}}}, {"y2", {{"field", "max"}}}}}}});
  return vega::chart("throughput", spec);
}

// Measured against predicted throughput per device (aiscale report --predict).
std::optional<Chart> prediction_chart(const std::vector<json>& studies) {
  json rows = json::array();
  std::set<double> ns;
  for_each_point(studies, [&](const json& d, const json& s, const json& p) {
    if (!p.contains("predicted") || !p["predicted"].contains("throughput_per_device")) return;
    ns.insert(p["n"].get<double>());
    rows.push_back({{"n", p["n"]}, {"series", label_of(s)}, {"figure", "measured"},
                    {"throughput", p["throughput_per_device"]["median"]}, {"unit", d["study"]["unit"]}});
    rows.push_back({{"n", p["n"]}, {"series", label_of(s)},
                    {"figure", "predicted on " + p["predicted"]["target"].get<std::string>()},
                    {"throughput", p["predicted"]["throughput_per_device"]}, {"unit", d["study"]["unit"]}});
  });
  if (rows.empty()) return std::nullopt;
  const json encoding = {{"x", n_axis(ns)},
                         {"y", quantitative("throughput", "throughput per device")},
                         {"color", nominal("series", "series")},
                         {"strokeDash", nominal("figure", "figure")},
                         {"tooltip", tooltip({{"series", "nominal"}, {"figure", "nominal"}, {"n", "quantitative"},
                                              {"throughput", "quantitative"}, {"unit", "nominal"}})}};
  return with_mark("prediction", base_spec(rows), line_with_points(), encoding);
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
  const json encoding = {
      {"x", quantitative("step", "step")},
      {"y", quantitative("loss", "loss", {{"zero", false}})},
      {"color", nominal("curve", "series · ranks")},
      {"tooltip", tooltip({{"curve", "nominal"}, {"step", "quantitative"}, {"loss", "quantitative"}})}};
  return with_mark("loss", base_spec(rows), "line", encoding);
}

// Where each point's step time goes (step_split): compute, communication and data wait,
// stacked, per series and rank count. Drawn when some point has the split.
std::optional<Chart> split_chart(const std::vector<json>& studies) {
  json rows = json::array();
  for_each_point(studies, [&](const json&, const json& s, const json& p) {
    if (!p.contains("step_split") || !p["step_split"].is_object()) return;
    const json& x = p["step_split"];
    const std::string point = fmt::format("{} · n={}", s["label"].get<std::string>(), p["n"].dump());
    int order = 0;
    for (auto [key, part] : {std::pair{"compute_s", "compute"}, {"communication_s", "communication"},
                             {"data_wait_s", "data wait"}})
      rows.push_back({{"point", point}, {"part", part}, {"order", order++},
                      {"ms", x.value(key, 0.0) * 1e3}});
  });
  if (rows.empty()) return std::nullopt;
  const json encoding = {
      {"y", {{"field", "point"}, {"type", "nominal"}, {"title", "series · ranks"}, {"sort", nullptr}}},
      {"x", {{"field", "ms"}, {"type", "quantitative"}, {"stack", "zero"}, {"title", "mean step time (ms)"}}},
      {"color", {{"field", "part"}, {"type", "nominal"}, {"title", "part of the step"},
                 {"sort", {"compute", "communication", "data wait"}}}},
      {"order", {{"field", "order"}, {"type", "quantitative"}}},
      {"tooltip", tooltip({{"point", "nominal"}, {"part", "nominal"}, {"ms", "quantitative"}})}};
  return with_mark("split", base_spec(rows), "bar", encoding);
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
                         {"encoding", {{"x", quantitative("step", "step")},
                                       {"y", quantitative("value", nullptr, {{"zero", false}})},
                                       {"color", nominal("curve", "run")},
                                       {"tooltip", tooltip({{"quantity", "nominal"}, {"step", "quantitative"},
                                                            {"value", "quantitative"}})}}}}},
               {"config", {{"legend", {{"orient", "bottom"}}}}}};
  return vega::chart("training", spec);
}

// Power or SM clock per n: drawn only when some point measured it.
std::optional<Chart> per_n_chart(const std::vector<json>& studies, const char* key, const char* id,
                                 const char* axis) {
  json rows = json::array();
  std::set<double> ns;
  for_each_point(studies, [&](const json&, const json& s, const json& p) {
    if (!p[key].is_number()) return;
    rows.push_back({{"n", p["n"]}, {"value", p[key]}, {"series", s["label"]}});
    ns.insert(p["n"].get<double>());
  });
  if (rows.empty()) return std::nullopt;
  const json encoding = {{"x", n_axis(ns)},
                         {"y", quantitative("value", axis, {{"zero", false}})},
                         {"color", nominal("series", "series")},
                         {"tooltip", tooltip({{"series", "nominal"}, {"n", "quantitative"}, {"value", "quantitative"}})}};
  return with_mark(id, base_spec(rows), line_with_points(), encoding);
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
                     per_n_chart(studies, "power_w", "power", "board power (W)"),
                     per_n_chart(studies, "sm_clock_mhz", "clock", "SM clock (MHz)")})
    if (chart) charts.push_back(std::move(*chart));
  for (auto& chart : tune_charts(studies)) charts.push_back(std::move(chart));  // aiscale tune
  return charts;
}

namespace vega {

json spec(json values, int legend_columns) {
  return {{"width", kWidth}, {"height", kHeight}, {"data", {{"values", std::move(values)}}},
          {"config", {{"legend", {{"orient", "bottom"}, {"columns", legend_columns}}}}}};
}

json nominal(const char* field, const char* title) {
  return {{"field", field}, {"type", "nominal"}, {"title", title}};
}

json quantitative(const char* field, json title, json scale) {
  json e = {{"field", field}, {"type", "quantitative"}, {"title", std::move(title)}};
  if (!scale.is_null()) e["scale"] = std::move(scale);
  return e;
}

json line_with_points() { return {{"type", "line"}, {"point", true}}; }

Chart chart(const std::string& id, json spec) {
  const ChartText& text = chart_text(id);
  return Chart{id, text.title, text.caption, std::move(spec)};
}

Chart with_mark(const std::string& id, json spec, json mark, json encoding) {
  spec["mark"] = std::move(mark);
  spec["encoding"] = std::move(encoding);
  return chart(id, std::move(spec));
}

json tooltip(std::initializer_list<std::pair<const char*, const char*>> fields) {
  json t = json::array();
  for (auto [field, type] : fields) t.push_back({{"field", field}, {"type", type}});
  return t;
}

}  // namespace vega

}  // namespace aiscale::report
