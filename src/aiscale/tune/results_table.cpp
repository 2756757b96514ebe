#include "aiscale/tune/results_table.h"

#include <cmath>
#include <filesystem>
#include <set>

#include <fmt/format.h>

#include "aiscale/core/fs.h"
#include "aiscale/tune/results_io.h"

namespace aiscale::tune {
namespace {

nlohmann::json trial_json(const TrialResult& r) {
  return {{"trial", r.trial < 0 ? nlohmann::json("default") : nlohmann::json(r.trial)},
          {"rung", r.rung}, {"folds", r.folds}, {"score", number_or_null(r.score)},
          {"score_std", number_or_null(r.score_std)}, {"seconds", r.seconds},
          {"params", params_to_json(r.params)}};
}

std::string csv_number(double v) { return std::isfinite(v) ? fmt::format("{:.9g}", v) : "nan"; }

}  // namespace

void write_results(const StudyConfig& c, const Dataset& d, const StudyOutcome& out,
                   const std::vector<RungSummary>& rungs, int ranks, int threads_per_rank) {
  namespace fs = std::filesystem;
  const fs::path dir(c.dir);
  std::set<std::string> names;
  for (const auto& [k, v] : out.defaults.params) names.insert(k);

  std::string csv = "trial,rung,folds," + std::string(metric_name(c.metric)) + "," +
                    std::string(metric_name(c.metric)) + "_std,seconds";
  for (const auto& n : names) csv += "," + n;
  csv += "\n";
  auto row = [&](const TrialResult& r) {
    csv += fmt::format("{},{},{},{},{},{:.6f}", r.trial < 0 ? std::string("default") : std::to_string(r.trial),
                       r.rung, r.folds, csv_number(r.score), csv_number(r.score_std), r.seconds);
    for (const auto& n : names) {
      auto it = r.params.find(n);
      csv += ',';
      if (it != r.params.end()) csv += value_text(it->second);
    }
    csv += "\n";
  };
  row(out.defaults);
  for (const auto& r : out.trials) row(r);

  nlohmann::json trials = nlohmann::json::array();
  for (const auto& r : out.trials) trials.push_back(trial_json(r));
  nlohmann::json rung_list = nlohmann::json::array();
  for (const auto& r : rungs)
    rung_list.push_back({{"rung", r.rung}, {"budget", r.budget < 0 ? nlohmann::json() : nlohmann::json(r.budget)},
                         {"trials", r.trials}, {"tasks", r.tasks}, {"seconds", r.seconds}});
  const nlohmann::json doc = {
      {"format", "aiscale-tune-results"}, {"version", 1}, {"name", c.name},
      {"backend", backend_name(c.backend)}, {"task", task_kind_name(c.task)},
      {"metric", metric_name(c.metric)}, {"higher_is_better", higher_is_better(c.metric)},
      {"search", c.search}, {"halving", c.halving.enabled}, {"folds", c.folds}, {"seed", c.seed},
      {"data", {{"source", d.source}, {"rows", d.rows}, {"features", d.features}, {"classes", d.classes}}},
      {"ranks", ranks}, {"threads_per_rank", threads_per_rank}, {"tasks_run", out.tasks_run},
      {"tasks_resumed", out.tasks_resumed}, {"wall_seconds", out.wall_seconds},
      {"date", utc_iso8601()}, {"host", host_name()}, {"cpu", cpu_model_name()},
      {"default", trial_json(out.defaults)}, {"best", trial_json(out.best)},
      {"rungs", rung_list}, {"trials", trials}};
  atomic_write_file((dir / "results.csv").string(), csv);
  atomic_write_file((dir / "results.json").string(), doc.dump(2) + "\n");
  nlohmann::json best = trial_json(out.best);
  best["metric"] = metric_name(c.metric);
  best["default_score"] = number_or_null(out.defaults.score);
  best["model"] = "model.json";
  atomic_write_file((dir / "best" / "params.json").string(), best.dump(2) + "\n");
}

}  // namespace aiscale::tune
