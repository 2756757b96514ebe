// A train run directory as a one-point study analysis.
#include "aiscale/report/run_analysis.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>

#include <fmt/format.h>
#include <toml++/toml.h>

#include "aiscale/core/error.h"
#include "aiscale/core/stats.h"
#include "aiscale/report/inputs.h"
#include "aiscale/sweep/statistics.h"

namespace aiscale::report {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Every line of a JSON-lines file; a line that does not parse fails naming file and line.
std::vector<json> read_json_lines(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail("cannot read '{}': no such file or no permission", path);
  std::vector<json> out;
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      json j = json::parse(line);
      if (!j.is_object()) throw std::runtime_error("not a JSON object");
      out.push_back(std::move(j));
    } catch (const std::exception& e) {
      fail("'{}' line {} is not a JSON record ({}): the file is damaged; remove that line or "
           "re-run the training", path, number, e.what());
    }
  }
  return out;
}

double number_or(const json& j, const char* key, double fallback) {
  return j.contains(key) && j[key].is_number() ? j[key].get<double>() : fallback;
}

struct RunConfig {
  std::string preset, precision = "fp32", device = "cpu", train_data;
  int64_t batch = 0, seq = 0, accum = 1;
};

// The few keys the report names, read leniently: a run directory from another aiscale
// version still reports.
RunConfig read_run_config(const std::string& path) {
  RunConfig c;
  toml::table t;
  try {
    t = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    fail("'{}' is not valid TOML ({}): the run directory is damaged", path, e.description());
  }
  c.preset = t["model"]["preset"].value_or(std::string{});
  c.precision = t["train"]["precision"].value_or(c.precision);
  c.device = t["train"]["device"].value_or(c.device);
  c.train_data = t["data"]["train"].value_or(std::string{});
  // Integers only: toml++ converts a float to an integer with no range check.
  const auto integer = [&](const char* key, int64_t fallback) {
    const auto* v = t["train"][key].as_integer();
    return v ? v->get() : fallback;
  };
  c.batch = integer("batch_size", 0);
  c.seq = integer("seq_len", 0);
  c.accum = integer("grad_accum", 1);
  return c;
}

json spread_of(const std::vector<double>& v, double median_value) {
  if (v.empty()) return {{"median", median_value}, {"min", median_value}, {"max", median_value}};
  return {{"median", median_value},
          {"min", *std::min_element(v.begin(), v.end())},
          {"max", *std::max_element(v.begin(), v.end())}};
}

// Step times of the lowest rank in steps.jsonl, without warm-up and epoch-edge batches.
std::vector<double> step_times_from_steps(const std::vector<json>& records, int* ranks_seen) {
  int64_t lowest = std::numeric_limits<int64_t>::max(), highest = -1;
  for (const json& r : records) {
    if (r.contains("event") || !r.contains("step_time_s")) continue;
    const int64_t rank = static_cast<int64_t>(number_or(r, "rank", 0));
    lowest = std::min(lowest, rank);
    highest = std::max(highest, rank);
  }
  *ranks_seen = highest < 0 ? 0 : static_cast<int>(highest + 1);
  std::vector<double> times;
  for (const json& r : records) {
    if (r.contains("event") || !r.contains("step_time_s") || !r["step_time_s"].is_number()) continue;
    if (static_cast<int64_t>(number_or(r, "rank", 0)) != lowest) continue;
    if (r.value("warmup", false) || r.value("first_in_epoch", false) || r.value("last_in_epoch", false))
      continue;
    times.push_back(r["step_time_s"].get<double>());
  }
  return times;
}

}  // namespace

json analyze_run_directory(const std::string& dir, std::vector<std::string>& files_read) {
  const fs::path d(dir);
  const std::string metrics_path = (d / "metrics.jsonl").string();
  files_read.push_back(metrics_path);
  const std::vector<json> metrics = read_json_lines(metrics_path);
  if (metrics.empty())
    fail("run directory '{}' has no logged steps yet (metrics.jsonl is empty): report it once "
         "training has logged a step", dir);

  json summary = json::object();
  if (fs::exists(d / "summary.json")) {
    files_read.push_back((d / "summary.json").string());
    summary = read_json_file(files_read.back());
    if (!summary.is_object()) fail("'{}' is not a JSON object: the run directory is damaged", files_read.back());
  }
  RunConfig cfg;
  if (fs::exists(d / "config.toml")) {
    files_read.push_back((d / "config.toml").string());
    cfg = read_run_config(files_read.back());
  }
  std::vector<json> steps;
  json split = nullptr;
  if (fs::exists(d / "steps.jsonl")) {
    files_read.push_back((d / "steps.jsonl").string());
    steps = read_json_lines(files_read.back());
    if (const auto s = sweep::step_split(sweep::read_step_records(files_read.back()), sweep::Window{}))
      split = sweep::to_json(*s);
  }

  // The step-time distribution and the ranks.
  int ranks_in_steps = 0;
  std::vector<double> times = step_times_from_steps(steps, &ranks_in_steps);
  const bool times_from_steps = !times.empty();
  std::vector<double> rates;  // tokens/s of all ranks together, first logged step left out
  for (size_t i = metrics.size() > 1 ? 1 : 0; i < metrics.size(); ++i) {
    if (!times_from_steps && metrics[i].contains("step_time_s") && metrics[i]["step_time_s"].is_number())
      times.push_back(metrics[i]["step_time_s"].get<double>());
    if (metrics[i].contains("tokens_per_s") && metrics[i]["tokens_per_s"].is_number())
      rates.push_back(metrics[i]["tokens_per_s"].get<double>());
  }
  const int world = static_cast<int>(number_or(summary, "world_size", std::max(1, ranks_in_steps)));
  const double total_median = number_or(summary, "tokens_per_s_median", median(rates));
  std::vector<double> per_device_rates;
  for (double r : rates) per_device_rates.push_back(r / world);

  const std::string label = "aiscale " + cfg.precision;
  json point = {{"n", world},
                {"repeats", 1},
                {"throughput_total", spread_of(rates, total_median)},
                {"throughput_per_device", spread_of(per_device_rates, total_median / world)},
                {"tflops_per_device", nullptr},
                {"mfu", nullptr},
                {"step_time_median_s", number_or(summary, "step_time_median_s", median(times))},
                {"step_split", split},
                {"speedup", nullptr},
                {"efficiency", nullptr},
                {"weak_efficiency", nullptr},
                {"peak_memory_bytes", nullptr},
                {"power_w", nullptr},
                {"sm_clock_mhz", nullptr},
                {"gpu_utilization_pct", nullptr},
                {"stragglers", json::array()}};
  json series = {{"label", label}, {"source", "aiscale"}, {"precision", cfg.precision},
                 {"points", json::array({point})}, {"amdahl", nullptr}};

  std::sort(times.begin(), times.end());
  json cdf = json::array();
  if (!times.empty()) cdf.push_back({{"label", label}, {"n", world}, {"step_times_s", times}});

  json train_curve = {{"label", label + " training"}, {"n", world}, {"repeat", 1},
                      {"step", json::array()}, {"loss", json::array()}};
  json val_curve = {{"label", label + " validation"}, {"n", world}, {"repeat", 1},
                    {"step", json::array()}, {"loss", json::array()}};
  for (const json& m : metrics) {
    if (!m.contains("step") || !m["step"].is_number()) continue;
    if (m.contains("loss") && m["loss"].is_number()) {
      train_curve["step"].push_back(m["step"]);
      train_curve["loss"].push_back(m["loss"]);
    }
    if (m.contains("val_loss") && m["val_loss"].is_number()) {
      val_curve["step"].push_back(m["step"]);
      val_curve["loss"].push_back(m["val_loss"]);
    }
  }
  // The validation pass after the last step is in summary.json only.
  if (summary.contains("val_loss") && summary["val_loss"].is_number() && summary.contains("steps") &&
      summary["steps"].is_number() &&
      (val_curve["step"].empty() || val_curve["step"].back() != summary["steps"])) {
    val_curve["step"].push_back(summary["steps"]);
    val_curve["loss"].push_back(summary["val_loss"]);
  }
  json curves = json::array({train_curve});
  if (!val_curve["step"].empty()) curves.push_back(val_curve);

  // The learning rate, gradient norm and throughput of every logged step.
  json training = {{"label", label}, {"n", world}, {"step", json::array()}, {"lr", json::array()},
                   {"grad_norm", json::array()}, {"tokens_per_s", json::array()}};
  for (const json& m : metrics) {
    if (!m.contains("step") || !m["step"].is_number()) continue;
    training["step"].push_back(m["step"]);
    for (const char* key : {"lr", "grad_norm", "tokens_per_s"})
      training[key].push_back(m.contains(key) && m[key].is_number() ? m[key] : json(nullptr));
  }

  std::string workload = cfg.preset.empty() ? "GPT" : "GPT " + cfg.preset;
  if (summary.contains("n_params") && summary["n_params"].is_number())
    workload += fmt::format(" ({:.3g} M parameters)", summary["n_params"].get<double>() / 1e6);
  if (cfg.batch > 0)
    workload += fmt::format(", batch {}×{} tokens per rank{}", cfg.batch, cfg.seq,
                            cfg.accum > 1 ? fmt::format(" × {} accumulation steps", cfg.accum) : "");
  if (!cfg.train_data.empty()) workload += ", data " + cfg.train_data;
  if (summary.empty()) workload += " (unfinished: no summary.json yet)";
  else if (summary.value("status", "") == "interrupted") workload += " (interrupted)";

  // Where it ran and with what (environment.json, written at the run's start): the hosts,
  // the CPU, the build and the libraries it found. Older runs without it report blanks.
  std::string host, version;
  json software = json::object();
  if (fs::exists(d / "environment.json")) {
    files_read.push_back((d / "environment.json").string());
    const json env = read_json_file(files_read.back());
    if (env.is_object()) {
      version = env.value("aiscale_version", "");
      if (env.contains("git_commit") && env["git_commit"].is_string() && !version.empty())
        version += " (" + env["git_commit"].get<std::string>() + ")";
      std::vector<std::string> hosts;
      if (env.contains("ranks") && env["ranks"].is_array())
        for (const json& r : env["ranks"])
          if (r.is_object() && r.contains("host") && r["host"].is_string() &&
              std::find(hosts.begin(), hosts.end(), r["host"].get<std::string>()) == hosts.end())
            hosts.push_back(r["host"].get<std::string>());
      for (const auto& h : hosts) host += (host.empty() ? "" : ", ") + h;
      if (env.contains("build") && env["build"].is_object() && env["build"].contains("compiler") &&
          env["build"]["compiler"].is_string())
        software["compiler"] = env["build"]["compiler"];
      if (env.contains("libraries") && env["libraries"].is_object())
        for (const auto& [name, value] : env["libraries"].items())
          if (value.is_string() && !value.get<std::string>().empty()) software[name] = value;
    }
  }

  const std::string config_path = (d / "config.toml").string();
  const std::string command =
      world > 1 ? fmt::format("aiscale launch -n {} -- train --config {}", world, config_path)
                : fmt::format("aiscale train --config {}", config_path);
  const std::string date = summary.value("finished", "");
  return {{"format", kAnalysisFormat},
          {"version", kAnalysisVersion},
          {"study", {{"name", d.filename().empty() ? d.parent_path().filename().string() : d.filename().string()},
                     {"dir", dir}, {"kind", "run"}, {"workload", workload}, {"unit", "tokens/s"},
                     {"created", date}, {"command", command}}},
          {"environment", {{"host", host}, {"device", summary.value("device", cfg.device)},
                           {"device_kind", cfg.device == "cpu" ? "cpu" : "gpu"},
                           {"aiscale_version", version}, {"date", date},
                           {"software", software}}},
          {"series", json::array({series})},
          {"cdf", cdf},
          {"loss_curves", curves},
          {"training_curves", json::array({training})},
          {"failed_points", json::array()}};
}

}  // namespace aiscale::report
