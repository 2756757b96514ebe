// Validation of the study-analysis document and labels for several studies side by side.
#include "aiscale/report/analysis.h"

#include <map>
#include <set>

#include "aiscale/core/error.h"

namespace aiscale::report {
namespace {

using nlohmann::json;

// Walks the document and fails naming the source and the field's path.
class Checker {
 public:
  explicit Checker(std::string source) : source_(std::move(source)) {}

  [[noreturn]] void fail_at(const std::string& path, const std::string& what) const {
    fail("'{}' is not a usable study analysis: field '{}' {} (the format is described in "
         "docs/guide/report.md; regenerate the analysis or fix the file)", source_, path, what);
  }

  json& object(json& parent, const std::string& key, const std::string& path) const {
    if (!parent.contains(key)) fail_at(join(path, key), "is missing (expected an object)");
    json& v = parent.at(key);
    if (!v.is_object()) fail_at(join(path, key), "must be an object, not " + type_of(v));
    return v;
  }
  json& array(json& parent, const std::string& key, const std::string& path) const {
    if (!parent.contains(key)) fail_at(join(path, key), "is missing (expected an array)");
    json& v = parent.at(key);
    if (!v.is_array()) fail_at(join(path, key), "must be an array, not " + type_of(v));
    return v;
  }
  void string(const json& parent, const std::string& key, const std::string& path) const {
    if (!parent.contains(key)) fail_at(join(path, key), "is missing (expected a string)");
    if (!parent.at(key).is_string())
      fail_at(join(path, key), "must be a string, not " + type_of(parent.at(key)));
  }
  void optional_string(const json& parent, const std::string& key, const std::string& path) const {
    if (parent.contains(key) && !parent.at(key).is_string() && !parent.at(key).is_null())
      fail_at(join(path, key), "must be a string, not " + type_of(parent.at(key)));
  }
  void number(const json& parent, const std::string& key, const std::string& path) const {
    if (!parent.contains(key)) fail_at(join(path, key), "is missing (expected a number)");
    if (!parent.at(key).is_number())
      fail_at(join(path, key), "must be a number, not " + type_of(parent.at(key)));
  }
  // A number or null; absent becomes null.
  void nullable_number(json& parent, const std::string& key, const std::string& path) const {
    if (!parent.contains(key)) parent[key] = nullptr;
    const json& v = parent.at(key);
    if (!v.is_number() && !v.is_null())
      fail_at(join(path, key), "must be a number or null, not " + type_of(v));
  }
  // {"median", "min", "max"}: median required, min/max default to the median.
  void spread(json& parent, const std::string& key, const std::string& path, bool nullable) const {
    if (!parent.contains(key) || parent.at(key).is_null()) {
      if (!nullable) fail_at(join(path, key), "is missing (expected {\"median\", \"min\", \"max\"})");
      parent[key] = nullptr;
      return;
    }
    json& s = parent[key];
    const std::string p = join(path, key);
    if (!s.is_object()) fail_at(p, "must be an object {\"median\", \"min\", \"max\"}, not " + type_of(s));
    number(s, "median", p);
    for (const char* bound : {"min", "max"}) {
      if (!s.contains(bound)) s[bound] = s["median"];
      number(s, bound, p);
    }
  }
  static std::string join(const std::string& path, const std::string& key) {
    return path.empty() ? key : path + "." + key;
  }
  static std::string index(const std::string& path, size_t i) {
    return path + "[" + std::to_string(i) + "]";
  }
  static std::string type_of(const json& v) {
    if (v.is_null()) return "null";
    if (v.is_string()) return "a string";
    if (v.is_boolean()) return "a boolean";
    if (v.is_number()) return "a number";
    if (v.is_array()) return "an array";
    return "an object";
  }

 private:
  std::string source_;
};

void check_point(const Checker& c, json& p, const std::string& path) {
  if (!p.is_object()) c.fail_at(path, "must be an object, not " + Checker::type_of(p));
  c.number(p, "n", path);
  if (p["n"].get<double>() <= 0) c.fail_at(Checker::join(path, "n"), "must be a positive rank count");
  if (!p.contains("repeats")) p["repeats"] = 1;
  c.number(p, "repeats", path);
  c.spread(p, "throughput_per_device", path, false);
  for (const char* key : {"throughput_total", "tflops_per_device", "mfu"}) c.spread(p, key, path, true);
  for (const char* key : {"step_time_median_s", "speedup", "efficiency", "peak_memory_bytes",
                          "power_w", "sm_clock_mhz", "gpu_utilization_pct"})
    c.nullable_number(p, key, path);
  if (!p.contains("weak_efficiency")) p["weak_efficiency"] = nullptr;
  if (json& w = p["weak_efficiency"]; !w.is_null()) {
    const std::string wp = Checker::join(path, "weak_efficiency");
    if (!w.is_object()) c.fail_at(wp, "must be an object {\"epoch\", \"train\", \"median_batch\"} or null");
    for (const char* key : {"epoch", "train", "median_batch"}) c.nullable_number(w, key, wp);
  }
  if (!p.contains("stragglers")) p["stragglers"] = json::array();
  json& st = c.array(p, "stragglers", path);
  for (size_t i = 0; i < st.size(); ++i) {
    const std::string sp = Checker::index(Checker::join(path, "stragglers"), i);
    if (!st[i].is_object()) c.fail_at(sp, "must be an object {\"rank\", \"median_step_s\", \"slower_by\"}");
    c.number(st[i], "rank", sp);
    c.number(st[i], "slower_by", sp);
  }
}

void check_series(const Checker& c, json& s, const std::string& path) {
  if (!s.is_object()) c.fail_at(path, "must be an object, not " + Checker::type_of(s));
  c.string(s, "label", path);
  if (!s.contains("source") || s["source"].is_null()) s["source"] = "aiscale";
  c.string(s, "source", path);
  if (!s.contains("precision") || s["precision"].is_null()) s["precision"] = "";
  c.string(s, "precision", path);
  json& points = (c.array(s, "points", path));
  for (size_t i = 0; i < points.size(); ++i)
    check_point(c, points[i], Checker::index(Checker::join(path, "points"), i));
  if (!s.contains("amdahl")) s["amdahl"] = nullptr;
  if (json& a = s["amdahl"]; !a.is_null()) {
    const std::string ap = Checker::join(path, "amdahl");
    if (!a.is_object()) c.fail_at(ap, "must be an object {\"serial_fraction\", \"residual_rms\"} or null");
    c.number(a, "serial_fraction", ap);
    c.nullable_number(a, "residual_rms", ap);
  }
}

void check_numbers(const Checker& c, json& parent, const std::string& key, const std::string& path) {
  json& v = c.array(parent, key, path);
  for (size_t i = 0; i < v.size(); ++i)
    if (!v[i].is_number())
      c.fail_at(Checker::index(Checker::join(path, key), i), "must be a number, not " + Checker::type_of(v[i]));
}

// cdf, loss_curves and failed_points: optional arrays of records.
json& optional_records(const Checker& c, json& doc, const char* key) {
  if (!doc.contains(key) || doc[key].is_null()) doc[key] = json::array();
  return (c.array(doc, key, ""));
}

// Checks that each record of the optional array `key` is an object (of the members `shape`
// lists, for the message), then hands it and its path to `check`.
template <typename Check>
void check_records(const Checker& c, json& doc, const char* key, const char* shape, Check&& check) {
  json& records = optional_records(c, doc, key);
  for (size_t i = 0; i < records.size(); ++i) {
    const std::string p = Checker::index(key, i);
    if (!records[i].is_object()) c.fail_at(p, std::string("must be an object ") + shape);
    check(records[i], p);
  }
}

}  // namespace

json validate_analysis(const json& input, const std::string& source) {
  Checker c(source);
  if (!input.is_object())
    fail("'{}' is not a study analysis: expected a JSON object of format '{}', found {}", source,
         kAnalysisFormat, Checker::type_of(input));
  json doc = input;
  if (!doc.contains("format") || !doc["format"].is_string())
    fail("'{}' is not a study analysis: it has no \"format\": \"{}\" field", source, kAnalysisFormat);
  const std::string format = doc["format"].get<std::string>();
  if (format == "aiscale-study")
    fail("'{}' is a study index (study.json), not its analysis: give the study directory "
         "instead", source);
  if (format != kAnalysisFormat)
    fail("'{}' is not a study analysis: its format is '{}', expected '{}'", source, format,
         kAnalysisFormat);
  if (!doc.contains("version") || !doc["version"].is_number_integer())
    c.fail_at("version", "is missing or not an integer (expected 1)");
  if (doc["version"].get<int64_t>() != kAnalysisVersion)
    fail("'{}' is a study analysis of version {}, but this aiscale reads version {}: use the "
         "aiscale that wrote it, or regenerate the analysis", source, doc["version"].get<int64_t>(),
         kAnalysisVersion);

  json& study = (c.object(doc, "study", ""));
  c.string(study, "name", "study");
  c.string(study, "kind", "study");
  const std::string kind = study["kind"].get<std::string>();
  if (kind != "strong" && kind != "weak" && kind != "run" && kind != "tune")
    c.fail_at("study.kind", "is '" + kind + "' (expected \"strong\", \"weak\", \"run\" or \"tune\")");
  if (doc.contains("tune") && !doc["tune"].is_object()) c.fail_at("tune", "must be an object");
  for (const char* key : {"dir", "workload", "unit", "created", "command"}) c.optional_string(study, key, "study");
  if (!study.contains("unit") || study["unit"].is_null()) study["unit"] = "tokens/s";

  json& env = (c.object(doc, "environment", ""));
  for (const char* key : {"host", "device", "device_kind", "aiscale_version", "date"})
    c.optional_string(env, key, "environment");
  if (env.contains("software") && !env["software"].is_object() && !env["software"].is_null())
    c.fail_at("environment.software", "must be an object {name: version}");

  json& series = (c.array(doc, "series", ""));
  for (size_t i = 0; i < series.size(); ++i) check_series(c, series[i], Checker::index("series", i));

  check_records(c, doc, "cdf", R"({"label", "n", "step_times_s"})", [&](json& r, const std::string& p) {
    c.string(r, "label", p);
    c.number(r, "n", p);
    check_numbers(c, r, "step_times_s", p);
  });
  check_records(c, doc, "loss_curves", R"({"label", "n", "repeat", "step", "loss"})",
                [&](json& r, const std::string& p) {
                  c.string(r, "label", p);
                  c.number(r, "n", p);
                  if (!r.contains("repeat")) r["repeat"] = 1;
                  c.number(r, "repeat", p);
                  check_numbers(c, r, "step", p);
                  check_numbers(c, r, "loss", p);
                  if (r["step"].size() != r["loss"].size())
                    c.fail_at(p, "has " + std::to_string(r["step"].size()) + " steps but " +
                                     std::to_string(r["loss"].size()) + " losses (they must pair up)");
                });
  check_records(c, doc, "failed_points", R"({"id", "reason"})", [&](json& r, const std::string& p) {
    c.string(r, "id", p);
    if (!r.contains("reason") || r["reason"].is_null()) r["reason"] = "";
    c.string(r, "reason", p);
  });
  // Reference checks (aiscale scale --reference): optional.
  if (doc.contains("references"))
    check_records(c, doc, "references", R"({"series", "n", "metric", "value", "measured", "pass"})",
                  [&](json& r, const std::string& p) {
                    c.string(r, "series", p);
                    c.number(r, "n", p);
                    c.string(r, "metric", p);
                    c.number(r, "value", p);
                    c.nullable_number(r, "measured", p);
                    c.nullable_number(r, "lower", p);
                    c.nullable_number(r, "upper", p);
                    if (!r.contains("pass") || !r["pass"].is_boolean())
                      c.fail_at(Checker::join(p, "pass"), "must be true or false");
                    if (!r.contains("why") || r["why"].is_null()) r["why"] = "";
                    c.string(r, "why", p);
                  });
  return doc;
}

std::vector<json> label_studies(const std::vector<StudyInput>& inputs) {
  std::vector<json> out;
  for (const auto& in : inputs) {
    out.push_back(in.analysis);
    out.back()["study"]["display_name"] = in.analysis["study"]["name"];
  }
  if (out.size() < 2) return out;
  std::map<std::string, int> name_count;
  for (const auto& d : out) ++name_count[d["study"]["name"].get<std::string>()];
  for (size_t k = 0; k < out.size(); ++k) {
    json& d = out[k];
    std::string name = d["study"]["name"].get<std::string>();
    if (name_count[name] > 1) name += " #" + std::to_string(k + 1);
    d["study"]["display_name"] = name;
    for (const char* list : {"series", "cdf", "loss_curves"})
      for (json& item : d[list]) item["label"] = name + ": " + item["label"].get<std::string>();
  }
  return out;
}

}  // namespace aiscale::report
