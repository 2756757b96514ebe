#include "aiscale/tune/study.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>

#include <fmt/format.h>

#include "aiscale/core/error.h"
#include "aiscale/core/fs.h"
#include "aiscale/core/log.h"
#include "aiscale/tune/evaluation.h"
#include "aiscale/tune/model.h"
#include "aiscale/tune/results_io.h"
#include "aiscale/tune/results_table.h"
#include "aiscale/tune/schedule.h"

namespace aiscale::tune {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct TaskSpec {
  std::string id;
  int64_t trial;
  int32_t fold;
  int64_t rung;
  int64_t budget;
  Params params;  // complete
};

std::string task_id(int64_t trial, int64_t rung, int32_t fold) {
  return trial < 0 ? fmt::format("default_f{}", fold) : fmt::format("r{}_t{:05}_f{}", rung, trial, fold);
}

uint64_t task_seed(uint64_t seed, int64_t trial, int32_t fold) {
  return seed * 1000003ULL + static_cast<uint64_t>(trial + 1) * 7919ULL + static_cast<uint64_t>(fold);
}

// Makes sure the directory belongs to this study (or starts it), on rank 0.
void prepare_directory(const StudyConfig& c, const Dataset& d, const RunOptions& o, int world) {
  const fs::path dir(c.dir);
  fs::create_directories(dir / "tasks");
  const uint64_t print = fingerprint(o.config_text);
  const fs::path meta = dir / "tune.json";
  if (fs::exists(meta) && !o.fresh) {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(read_file(meta.string()));
    } catch (const nlohmann::json::exception& e) {
      fail("'{}' is corrupt ({}): remove the directory or run with --fresh", meta.string(), e.what());
    }
    if (j.value("fingerprint", "") != fmt::format("{:016x}", print))
      fail("'{}' holds a study of another configuration (its tune.json differs from {}): run with "
           "--fresh to start over there, or set study.dir to another directory", c.dir, c.config_path);
    return;
  }
  if (o.fresh) {
    fs::remove_all(dir / "tasks");
    fs::create_directories(dir / "tasks");
  }
  nlohmann::json j = {{"format", "aiscale-tune"}, {"version", 1}, {"name", c.name},
                      {"backend", backend_name(c.backend)}, {"metric", metric_name(c.metric)},
                      {"task", task_kind_name(c.task)}, {"data", d.source}, {"rows", d.rows},
                      {"features", d.features}, {"classes", d.classes}, {"folds", c.folds},
                      {"ranks", world}, {"created", utc_iso8601()},
                      {"fingerprint", fmt::format("{:016x}", print)}, {"config", o.config_text}};
  atomic_write_file(meta.string(), j.dump(2) + "\n");
}

struct RungStats {
  int64_t run = 0, resumed = 0;
};

// Runs this rank's share of `tasks` (those not finished before), then waits for every rank.
RungStats run_rung(const StudyConfig& c, const Dataset& d, const std::vector<Split>& splits,
                   const std::vector<TaskSpec>& tasks, parallel::Communicator& comm, int threads,
                   const RunOptions& o) {
  const fs::path task_dir = fs::path(c.dir) / "tasks";
  std::vector<size_t> mine;
  RungStats stats;
  const auto slots = static_cast<size_t>(o.shards * comm.world());
  const auto slot = static_cast<size_t>(o.shard * comm.world() + comm.rank());
  for (size_t i = 0; i < tasks.size(); ++i) {
    if (i % slots != slot) continue;
    if (fs::exists(task_dir / (tasks[i].id + ".json"))) ++stats.resumed;
    else mine.push_back(i);
  }
  const ThreadPlan plan = plan_threads(static_cast<int64_t>(mine.size()), threads, c.threads_per_task);
  run_tasks(static_cast<int64_t>(mine.size()), plan, [&](int64_t k, int task_threads) {
    const TaskSpec& t = tasks[mine[k]];
    const auto start = Clock::now();
    const Split& s = splits[t.fold];
    const Matrix train = gather(d, s.train), eval = gather(d, s.eval);
    FitOptions fo;
    fo.params = t.params;
    fo.kind = d.kind;
    fo.classes = d.classes;
    fo.threads = task_threads;
    fo.seed = task_seed(c.seed, t.trial, t.fold);
    const auto model = fit_model(c.backend, train, fo);
    const std::vector<float> pred = model->predict(eval);
    write_task_record((task_dir / (t.id + ".json")).string(),
                      {.id = t.id,
                       .trial = t.trial,
                       .fold = t.fold,
                       .rung = t.rung,
                       .budget = t.budget,
                       .score = score(c.metric, eval.y, pred, d.classes),
                       .seconds = std::chrono::duration<double>(Clock::now() - start).count(),
                       .rank = comm.rank(),
                       .threads = task_threads});
  });
  stats.run = static_cast<int64_t>(mine.size());
  double counts[2] = {static_cast<double>(stats.run), static_cast<double>(stats.resumed)};
  comm.allreduce_sum(counts, 2);  // also the barrier: every rank's files are written
  stats.run = static_cast<int64_t>(counts[0]);
  stats.resumed = static_cast<int64_t>(counts[1]);
  return stats;
}

// Reads back a rung's task files into per-trial results.
void collect(const StudyConfig& c, const std::vector<TaskSpec>& tasks, std::map<int64_t, TrialResult>& results) {
  const fs::path task_dir = fs::path(c.dir) / "tasks";
  std::map<int64_t, std::vector<double>> scores;
  std::map<int64_t, double> seconds;
  for (const auto& t : tasks) {
    const auto r = read_task_record((task_dir / (t.id + ".json")).string());
    if (!r)
      fail("task result '{}' is missing after every rank finished its tasks: the ranks must share "
           "the tune directory '{}' (a shared file system)", (task_dir / (t.id + ".json")).string(), c.dir);
    scores[t.trial].push_back(r->score);
    seconds[t.trial] += r->seconds;
    TrialResult& tr = results[t.trial];
    tr.trial = t.trial;
    tr.params = t.params;
    tr.rung = t.rung;
  }
  for (auto& [trial, s] : scores) {
    TrialResult& tr = results[trial];
    double mean = 0;
    for (double v : s) mean += v;
    mean /= static_cast<double>(s.size());
    double var = 0;
    for (double v : s) var += (v - mean) * (v - mean);
    tr.score = mean;
    tr.score_std = s.size() > 1 ? std::sqrt(var / static_cast<double>(s.size() - 1)) : 0.0;
    tr.folds = static_cast<int64_t>(s.size());
    tr.seconds += seconds[trial];
  }
}

}  // namespace

bool better(Metric m, double a, double b) {
  if (std::isnan(a)) return false;
  if (std::isnan(b)) return true;
  return higher_is_better(m) ? a > b : a < b;
}

Dataset load_study_data(const StudyConfig& c) {
  Dataset d;
  if (c.data.source == "csv") {
    d = read_csv(c.data.path, c.data.target, c.task);
  } else if (c.data.source == "idx") {
    d = read_idx(c.data.images, c.data.labels, c.data.image_pool);
  } else {
    d = synthetic_regression(c.data.synthetic_rows, c.data.noise, c.seed);
  }
  return subsample(d, c.data.rows, c.seed);
}

StudyOutcome run_study(StudyConfig c, const Dataset& d, parallel::Communicator& comm, const RunOptions& o) {
  const auto study_start = Clock::now();
  check_against_data(c, d);
  if (o.shards > 1 && c.halving.enabled)
    fail("{}: --shard splits the tasks of one rung among jobs, but successive halving needs every "
         "result of a rung before the next: remove [halving] for a job array, or run the study as "
         "one job (ranks across nodes)", c.config_path);
  const int threads = available_threads(c.threads);
  if (comm.rank() == 0) prepare_directory(c, d, o, comm.world());
  comm.barrier();

  const std::vector<int32_t> fold_of = assign_folds(d, c.folds, c.seed, d.kind == TaskKind::classification);
  std::vector<Split> splits;
  for (int32_t f = 0; f < c.folds; ++f) splits.push_back(fold_split(fold_of, f));

  const std::vector<Params> trials = make_trials(c);
  const Hyperparameter& budget_h = budget_hyperparameter(c.backend);
  std::map<int64_t, TrialResult> results;
  StudyOutcome out;
  out.dir = c.dir;
  std::vector<RungSummary> rungs;

  std::vector<int64_t> active(trials.size());
  for (size_t i = 0; i < trials.size(); ++i) active[i] = static_cast<int64_t>(i);
  int64_t budget = c.halving.enabled ? c.halving.min_budget : 0;
  for (int64_t rung = 0;; ++rung) {
    std::vector<TaskSpec> tasks;
    if (rung == 0) {  // the default hyperparameters, for comparison
      const Params p = with_defaults(c.backend, c.fixed);
      for (int32_t f = 0; f < c.folds; ++f)
        tasks.push_back({task_id(-1, 0, f), -1, f, 0, param_int(p, budget_h.name), p});
    }
    for (int64_t t : active) {
      Params p = trials[t];
      if (c.halving.enabled) p[budget_h.name] = Value{budget};
      p = with_defaults(c.backend, p);
      for (int32_t f = 0; f < c.folds; ++f)
        tasks.push_back({task_id(t, rung, f), t, f, rung, param_int(p, budget_h.name), p});
    }
    const auto rung_start = Clock::now();
    const RungStats stats = run_rung(c, d, splits, tasks, comm, threads, o);
    if (o.shards > 1) {  // one job of an array: the merge is a later run's
      out.tasks_run = stats.run;
      out.tasks_resumed = stats.resumed;
      out.merged = false;
      out.wall_seconds = std::chrono::duration<double>(Clock::now() - study_start).count();
      return out;
    }
    collect(c, tasks, results);
    out.tasks_run += stats.run;
    out.tasks_resumed += stats.resumed;
    // Rank the rung's trials, best first (ties: the lower trial number).
    std::sort(active.begin(), active.end(), [&](int64_t a, int64_t b) {
      const double sa = results[a].score, sb = results[b].score;
      if (better(c.metric, sa, sb)) return true;
      if (better(c.metric, sb, sa)) return false;
      return a < b;
    });
    const double rung_seconds = std::chrono::duration<double>(Clock::now() - rung_start).count();
    rungs.push_back({rung, c.halving.enabled ? budget : -1, static_cast<int64_t>(active.size()),
                     static_cast<int64_t>(tasks.size()), rung_seconds});
    if (comm.rank() == 0 && !o.quiet) {
      const ThreadPlan plan = plan_threads(static_cast<int64_t>(tasks.size()) / comm.world(), threads, c.threads_per_task);
      std::printf("rung %lld%s: %zu trials x %lld folds%s = %zu tasks (%lld resumed) on %d rank%s x %d "
                  "worker%s x %d thread%s: %.2f s; best %s %.6g (trial %lld)\n",
                  static_cast<long long>(rung),
                  c.halving.enabled ? fmt::format(" ({} {})", budget_h.name, budget).c_str() : "",
                  active.size(), static_cast<long long>(c.folds), rung == 0 ? " + the defaults" : "", tasks.size(),
                  static_cast<long long>(stats.resumed), comm.world(), comm.world() == 1 ? "" : "s",
                  plan.workers, plan.workers == 1 ? "" : "s", plan.threads_per_task,
                  plan.threads_per_task == 1 ? "" : "s", rung_seconds, metric_name(c.metric),
                  results[active.front()].score, static_cast<long long>(active.front()));
      std::fflush(stdout);
    }
    if (!c.halving.enabled || budget >= c.halving.max_budget) break;
    active.resize(std::max<size_t>(1, active.size() / static_cast<size_t>(c.halving.eta)));
    budget = std::min(budget * c.halving.eta, c.halving.max_budget);
  }
  out.defaults = results.at(-1);
  for (const auto& [t, r] : results)
    if (t >= 0) out.trials.push_back(r);
  out.best = results.at(active.front());
  out.wall_seconds = std::chrono::duration<double>(Clock::now() - study_start).count();

  if (comm.rank() == 0) {
    // The best trial retrained on every row with all of this rank's threads, and saved.
    const fs::path best_dir = fs::path(c.dir) / "best";
    fs::create_directories(best_dir);
    FitOptions fo;
    fo.params = out.best.params;
    fo.kind = d.kind;
    fo.classes = d.classes;
    fo.threads = threads;
    fo.seed = task_seed(c.seed, out.best.trial, 0);
    run_tasks(1, ThreadPlan{1, threads}, [&](int64_t, int) {
      const auto model = fit_model(c.backend, whole(d), fo);
      model->save((best_dir / ("model" + model->file_extension())).string());
    });
    write_results(c, d, out, rungs, comm.world(), threads);
  }
  comm.barrier();
  return out;
}

}  // namespace aiscale::tune
