#include "aiscale/report/tune_analysis.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <optional>
#include <utility>

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

// Spearman's rank correlation of two equally long samples (ties share their mean rank);
// NaN when either is constant.
double spearman(const std::vector<double>& a, const std::vector<double>& b) {
  auto ranks = [](const std::vector<double>& v) {
    std::vector<size_t> idx(v.size());
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
    std::sort(idx.begin(), idx.end(), [&](size_t x, size_t y) { return v[x] < v[y]; });
    std::vector<double> r(v.size());
    for (size_t i = 0; i < idx.size();) {
      size_t j = i;
      while (j + 1 < idx.size() && v[idx[j + 1]] == v[idx[i]]) ++j;
      for (size_t k = i; k <= j; ++k) r[idx[k]] = 0.5 * static_cast<double>(i + j);
      i = j + 1;
    }
    return r;
  };
  const std::vector<double> ra = ranks(a), rb = ranks(b);
  const double n = static_cast<double>(a.size());
  double ma = 0, mb = 0;
  for (size_t i = 0; i < a.size(); ++i) ma += ra[i] / n, mb += rb[i] / n;
  double sab = 0, saa = 0, sbb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    sab += (ra[i] - ma) * (rb[i] - mb);
    saa += (ra[i] - ma) * (ra[i] - ma);
    sbb += (rb[i] - mb) * (rb[i] - mb);
  }
  return saa > 0 && sbb > 0 ? sab / std::sqrt(saa * sbb) : NAN;
}

// A study of training runs (aiscale tune with study.backend = "train"): each trial's
// validation curve with how it ended, and each searched key's importance: |Spearman's rho|
// between the key's value and the validation loss at the first rung (where every trial that
// ran has one; the last step's loss without halving).
json analyze_train_search(const json& results) {
  json tune = {{"kind", "train"}, {"metric", "val_loss"}, {"backend", "train"}, {"higher_is_better", false},
               {"trials", json::array()}, {"scaling", json::array()}, {"curves", json::array()},
               {"importance", json::array()}};
  const json& halving = results.at("halving");
  const int64_t first_rung = halving.is_object() && !halving.at("rungs").empty()
                                 ? halving["rungs"][0].get<int64_t>() : results.at("steps").get<int64_t>();
  std::map<std::string, std::pair<std::vector<double>, std::vector<double>>> samples;  // key -> (values, losses)
  for (const json& t : results.at("trials")) {
    const std::string name = t.at("name").get<std::string>(), status = t.at("status").get<std::string>();
    for (const json& point : t.at("curve"))
      if (point.at(1).is_number())
        tune["curves"].push_back({{"trial", name}, {"step", point[0]}, {"val_loss", point[1]},
                                  {"ended", status == "stopped" ? "stopped early" : status}});
    tune["trials"].push_back({{"trial", name}, {"status", status}, {"val_loss", t.at("val_loss")},
                              {"last_step", t.at("last_step")}, {"params", t.at("params")}});
    double at_rung = NAN;
    for (const json& point : t.at("curve"))
      if (point.at(0).get<int64_t>() == first_rung && point.at(1).is_number()) at_rung = point[1].get<double>();
    if (t.at("trial").get<int64_t>() < 0 || !std::isfinite(at_rung)) continue;
    for (const auto& [key, v] : t.at("params").items())
      if (v.is_number()) {
        samples[key].first.push_back(v.get<double>());
        samples[key].second.push_back(at_rung);
      }
  }
  for (const json& p : results.at("params")) {
    const std::string key = p.at("name").get<std::string>();
    const auto it = samples.find(key);
    if (it == samples.end() || it->second.first.size() < 3) continue;
    const double rho = spearman(it->second.first, it->second.second);
    if (!std::isfinite(rho)) continue;
    tune["importance"].push_back({{"param", key}, {"rho", rho}, {"importance", std::abs(rho)},
                                  {"trials", it->second.first.size()}, {"at_step", first_rung}});
  }
  tune["default_score"] = results.value("default_val_loss", json());
  tune["best"] = results.value("best", json());
  return tune;
}

// DIR/<kind>.json that aiscale tune writes (kind: results or scaling; its format
// aiscale-tune-<kind>), noted in `files_read`: its path and content; none when absent.
std::optional<std::pair<std::string, json>> read_tune_file(const fs::path& dir, const std::string& kind,
                                                           std::vector<std::string>& files_read) {
  const std::string file = (dir / (kind + ".json")).string();
  if (!fs::exists(file)) return std::nullopt;
  files_read.push_back(file);
  json doc = read_json_file(file);
  if (doc.value("format", "") != "aiscale-tune-" + kind)
    fail("'{}' is not a tune {} file (format '{}')", file, kind, doc.value("format", ""));
  return std::pair{file, std::move(doc)};
}

}  // namespace

json analyze_tune_directory(const std::string& dir, std::vector<std::string>& files_read) {
  const fs::path p(dir);
  if (fs::exists(p / "tune.json") && read_json_file((p / "tune.json").string()).value("backend", "") == "train") {
    files_read.push_back((p / "tune.json").string());
    const std::string file = (p / "results.json").string();
    if (!fs::exists(file))
      fail("tune directory '{}' has no results.json yet: run `aiscale tune` on its study file to the end "
           "(an interrupted study writes it too)", dir);
    files_read.push_back(file);
    const json results = read_json_file(file);
    if (results.value("kind", "") != "train-search")
      fail("'{}' is not the results of a study of training runs (kind '{}')", file, results.value("kind", ""));
    json study = {{"name", results.value("name", "tune")}, {"kind", "tune"}, {"dir", dir},
                  {"workload", "train " + fs::path(results.value("train_config", "")).filename().string()},
                  {"unit", "val_loss"}, {"created", ""}};
    json environment = {{"host", ""}, {"device", results.value("device", "")},
                        {"device_kind", results.value("device", "cpu") == "cuda" ? "gpu" : "cpu"}, {"date", ""}};
    return {{"format", "aiscale-study-analysis"}, {"version", 1}, {"study", study}, {"environment", environment},
            {"series", json::array()}, {"tune", analyze_train_search(results)}};
  }
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
  if (const auto read = read_tune_file(p, "results", files_read)) {
    const auto& [file, results] = *read;
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
  if (const auto read = read_tune_file(p, "scaling", files_read)) {
    const auto& [file, scaling] = *read;
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
    if (d["tune"].value("kind", "") == "train") continue;  // drawn by train_search_charts
    for (const json& t : d["tune"]["trials"]) {
      if (!t["score"].is_null())
        trials.push_back({{"study", name}, {"series", "trial score"}, {"trial", t["trial"]}, {"score", t["score"]}});
      if (!t["best"].is_null())
        trials.push_back({{"study", name}, {"series", "best so far"}, {"trial", t["trial"]}, {"score", t["best"]}});
    }
  }
  std::vector<Chart> out;
  if (!times.empty()) {
    const json encoding = {
        {"x", vega::quantitative("models", "models", {{"type", "log"}})},
        {"y", vega::quantitative("seconds", "time (s)", {{"type", "log"}})},
        {"color", vega::nominal("time", "time")},
        {"strokeDash", vega::nominal("study", "study")},
        {"tooltip", vega::tooltip({{"study", "nominal"}, {"models", "quantitative"}, {"time", "nominal"},
                                   {"seconds", "quantitative"}})}};
    out.push_back(
        vega::with_mark("tune_time", vega::spec(times, 2), vega::line_with_points(), encoding));
  }
  if (!trials.empty()) {
    const json encoding = {
        {"x", vega::quantitative("trial", "trial")},
        {"y", vega::quantitative("score", "cross-validated score", {{"zero", false}})},
        {"color", vega::nominal("series", "")},
        {"strokeDash", vega::nominal("study", "study")},
        {"tooltip", vega::tooltip({{"study", "nominal"}, {"trial", "quantitative"}, {"score", "quantitative"}})}};
    out.push_back(
        vega::with_mark("tune_best", vega::spec(trials, 2), vega::line_with_points(), encoding));
  }
  for (auto& c : train_search_charts(studies)) out.push_back(std::move(c));
  return out;
}

std::vector<Chart> train_search_charts(const std::vector<json>& studies) {
  json curves = json::array(), importance = json::array();
  for (const json& d : studies) {
    if (!d.contains("tune") || d["tune"].value("kind", "") != "train") continue;
    const std::string name = d["study"].value("display_name", d["study"]["name"].get<std::string>());
    for (json c : d["tune"]["curves"]) {
      c["study"] = name;
      curves.push_back(std::move(c));
    }
    for (json i : d["tune"]["importance"]) {
      i["study"] = name;
      importance.push_back(std::move(i));
    }
  }
  std::vector<Chart> out;
  if (!curves.empty()) {
    const json encoding = {
        {"x", vega::quantitative("step", "training step")},
        {"y", vega::quantitative("val_loss", "validation loss", {{"zero", false}})},
        {"detail", {{"field", "trial"}, {"type", "nominal"}}},
        {"color", vega::nominal("ended", "trial")},
        {"strokeDash", vega::nominal("study", "study")},
        {"tooltip", vega::tooltip({{"study", "nominal"}, {"trial", "nominal"}, {"step", "quantitative"},
                                   {"val_loss", "quantitative"}, {"ended", "nominal"}})}};
    out.push_back(
        vega::with_mark("tune_curves", vega::spec(curves, 3), vega::line_with_points(), encoding));
  }
  if (!importance.empty()) {
    json tip = vega::tooltip({{"study", "nominal"}, {"param", "nominal"}, {"rho", "quantitative"},
                              {"trials", "quantitative"}, {"at_step", "quantitative"}});
    tip[2]["format"] = ".2f";
    const json encoding = {
        {"y", {{"field", "param"}, {"type", "nominal"}, {"title", "key"}, {"sort", "-x"}}},
        {"x", vega::quantitative("importance", "|Spearman rho| with the validation loss",
                                 {{"domain", json::array({0, 1})}})},
        {"color", vega::nominal("study", "study")},
        {"yOffset", {{"field", "study"}, {"type", "nominal"}}},
        {"tooltip", tip}};
    out.push_back(vega::with_mark("tune_importance", vega::spec(importance, 3), "bar", encoding));
  }
  return out;
}

}  // namespace aiscale::report
