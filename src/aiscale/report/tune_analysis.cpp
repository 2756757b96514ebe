#include "aiscale/report/tune_analysis.h"

#include <cmath>
#include <filesystem>

#include "aiscale/core/error.h"
#include "aiscale/report/inputs.h"

namespace aiscale::report {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

// A number field of a record, failing with the file and field named.
double number_at(const json& record, const char* key, const std::string& where) {
  if (!record.contains(key) || !record[key].is_number())
    fail("'{}': {} has no number '{}': the file is not one aiscale tune wrote, or it is damaged", where,
         record.dump().substr(0, 80), key);
  return record[key].get<double>();
}

}  // namespace

json analyze_tune_directory(const std::string& dir, std::vector<std::string>& files_read) {
  const fs::path p(dir);
  // tune.json describes a search; a directory of --scaling runs only has scaling.json.
  const fs::path meta_file = fs::exists(p / "tune.json") ? p / "tune.json" : p / "scaling.json";
  const json meta = read_json_file(meta_file.string());
  if (meta.value("format", "") != "aiscale-tune" && meta.value("format", "") != "aiscale-tune-scaling")
    fail("'{}' is not a file aiscale tune wrote (format '{}')", meta_file.string(), meta.value("format", ""));
  if (meta_file.filename() == "tune.json") files_read.push_back(meta_file.string());
  const std::string data = meta.contains("data") && meta["data"].is_object()
                               ? meta["data"].value("source", "") : meta.value("data", "");
  json tune = {{"metric", meta.value("metric", "")}, {"backend", meta.value("backend", "")},
               {"higher_is_better", false}, {"trials", json::array()}, {"scaling", json::array()}};
  json study = {{"name", meta.value("name", "tune")}, {"kind", "tune"}, {"dir", dir},
                {"workload", meta.value("backend", "") + " on " + data},
                {"unit", meta.value("metric", "")}, {"created", meta.value("created", meta.value("date", ""))}};
  json environment = json::object();
  bool any = false;
  if (fs::exists(p / "results.json")) {
    const std::string file = (p / "results.json").string();
    files_read.push_back(file);
    const json results = read_json_file(file);
    if (results.value("format", "") != "aiscale-tune-results")
      fail("'{}' is not a tune results file (format '{}')", file, results.value("format", ""));
    const bool higher = results.value("higher_is_better", false);
    tune["higher_is_better"] = higher;
    double best = NAN;
    for (const json& t : results.at("trials")) {
      const json& s = t.at("score");
      const double score = s.is_number() ? s.get<double>() : NAN;
      if (std::isfinite(score) && (!std::isfinite(best) || (higher ? score > best : score < best))) best = score;
      tune["trials"].push_back({{"trial", number_at(t, "trial", file)}, {"score", s},
                                {"rung", t.value("rung", 0)},
                                {"best", std::isfinite(best) ? json(best) : json()}});
    }
    if (results.contains("default")) tune["default_score"] = results["default"].value("score", json());
    environment = {{"host", results.value("host", "")}, {"device", results.value("cpu", "")},
                   {"device_kind", "cpu"}, {"date", results.value("date", "")}};
    any = true;
  }
  if (fs::exists(p / "scaling.json")) {
    const std::string file = (p / "scaling.json").string();
    files_read.push_back(file);
    const json scaling = read_json_file(file);
    if (scaling.value("format", "") != "aiscale-tune-scaling")
      fail("'{}' is not a tune scaling file (format '{}')", file, scaling.value("format", ""));
    for (const json& r : scaling.at("rows"))
      tune["scaling"].push_back({{"models", number_at(r, "models", file)},
                                 {"wall_seconds", number_at(r, "wall_seconds", file)},
                                 {"serial_seconds", number_at(r, "serial_seconds", file)},
                                 {"speedup", number_at(r, "speedup", file)},
                                 {"efficiency", number_at(r, "efficiency", file)},
                                 {"threads", number_at(r, "threads", file)}});
    if (environment.empty())
      environment = {{"host", scaling.value("host", "")}, {"device", scaling.value("cpu", "")},
                     {"device_kind", "cpu"}, {"date", scaling.value("date", "")}};
    any = true;
  }
  if (!any)
    fail("tune directory '{}' has neither results.json nor scaling.json yet: run `aiscale tune` on "
         "its study file first", dir);
  return {{"format", "aiscale-study-analysis"}, {"version", 1}, {"study", study},
          {"environment", environment}, {"series", json::array()}, {"tune", tune}};
}

std::vector<Chart> tune_charts(const std::vector<json>& studies) {
  json times = json::array(), trials = json::array();
  for (const json& d : studies) {
    if (!d.contains("tune")) continue;
    const std::string name = d["study"].value("display_name", d["study"]["name"].get<std::string>());
    for (const json& r : d["tune"]["scaling"]) {
      times.push_back({{"study", name}, {"time", "wall"}, {"models", r["models"]}, {"seconds", r["wall_seconds"]}});
      times.push_back({{"study", name}, {"time", "serial-equivalent"}, {"models", r["models"]},
                       {"seconds", r["serial_seconds"]}});
    }
    for (const json& t : d["tune"]["trials"]) {
      if (!t["score"].is_null())
        trials.push_back({{"study", name}, {"series", "trial score"}, {"trial", t["trial"]}, {"score", t["score"]}});
      if (!t["best"].is_null())
        trials.push_back({{"study", name}, {"series", "best so far"}, {"trial", t["trial"]}, {"score", t["best"]}});
    }
  }
  std::vector<Chart> out;
  auto spec = [](json values) {
    return json{{"width", 420}, {"height", 260}, {"data", {{"values", std::move(values)}}},
                {"config", {{"legend", {{"orient", "bottom"}, {"columns", 2}}}}}};
  };
  if (!times.empty()) {
    json s = spec(times);
    s["mark"] = {{"type", "line"}, {"point", true}};
    s["encoding"] = {
        {"x", {{"field", "models"}, {"type", "quantitative"}, {"title", "models"}, {"scale", {{"type", "log"}}}}},
        {"y", {{"field", "seconds"}, {"type", "quantitative"}, {"title", "time (s)"}, {"scale", {{"type", "log"}}}}},
        {"color", {{"field", "time"}, {"type", "nominal"}, {"title", "time"}}},
        {"strokeDash", {{"field", "study"}, {"type", "nominal"}, {"title", "study"}}},
        {"tooltip", json::array({{{"field", "study"}, {"type", "nominal"}}, {{"field", "models"}, {"type", "quantitative"}},
                                 {{"field", "time"}, {"type", "nominal"}}, {{"field", "seconds"}, {"type", "quantitative"}}})}};
    out.push_back({"tune_time", "Time against models (aiscale tune --scaling)",
                   "Wall time of N models sharing the threads (and ranks), against the serial-equivalent "
                   "time (the tasks' own durations summed: one thread running them in turn). The gap "
                   "is the speedup.", s});
  }
  if (!trials.empty()) {
    json s = spec(trials);
    s["mark"] = {{"type", "line"}, {"point", true}};
    s["encoding"] = {
        {"x", {{"field", "trial"}, {"type", "quantitative"}, {"title", "trial"}}},
        {"y", {{"field", "score"}, {"type", "quantitative"}, {"title", "cross-validated score"}, {"scale", {{"zero", false}}}}},
        {"color", {{"field", "series"}, {"type", "nominal"}, {"title", ""}}},
        {"strokeDash", {{"field", "study"}, {"type", "nominal"}, {"title", "study"}}},
        {"tooltip", json::array({{{"field", "study"}, {"type", "nominal"}}, {{"field", "trial"}, {"type", "quantitative"}},
                                 {{"field", "score"}, {"type", "quantitative"}}})}};
    out.push_back({"tune_best", "Best score against trials (aiscale tune)",
                   "Each trial's cross-validated score (at the last rung it reached under successive "
                   "halving) and the best so far, in trial order.", s});
  }
  return out;
}

}  // namespace aiscale::report
