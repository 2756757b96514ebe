#include "aiscale/tune/scaling.h"

#include <chrono>
#include <cstdio>
#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "aiscale/core/error.h"
#include "aiscale/core/fs.h"
#include "aiscale/core/validate.h"
#include "aiscale/tune/evaluation.h"
#include "aiscale/tune/model.h"
#include "aiscale/tune/results_io.h"
#include "aiscale/tune/schedule.h"
#include "aiscale/tune/study.h"

namespace aiscale::tune {

std::vector<int64_t> parse_model_counts(const std::string& text) {
  std::vector<int64_t> out;
  size_t start = 0;
  for (;;) {
    const size_t comma = text.find(',', start);
    const std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    out.push_back(validate::parse_int(item, 1, 10000000, "--scaling (a model count)"));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

std::vector<ScalingRow> run_scaling(StudyConfig c, const Dataset& d, const std::vector<int64_t>& counts,
                                    parallel::Communicator& comm, bool quiet) {
  using Clock = std::chrono::steady_clock;
  check_against_data(c, d);
  const int threads = available_threads(c.threads);
  const std::vector<int32_t> fold_of = assign_folds(d, c.folds, c.seed, d.kind == TaskKind::classification);
  std::vector<Matrix> train, eval;
  for (int32_t f = 0; f < c.folds; ++f) {
    const Split s = fold_split(fold_of, f);
    train.push_back(gather(d, s.train));
    eval.push_back(gather(d, s.eval));
  }
  std::vector<ScalingRow> rows;
  for (int64_t n : counts) {
    const std::vector<Params> models = random_trials(c, n, static_cast<uint64_t>(n));
    const int64_t tasks = n * c.folds;
    std::vector<int64_t> mine;
    for (int64_t i = comm.rank(); i < tasks; i += comm.world()) mine.push_back(i);
    const ThreadPlan plan = plan_threads(tasks / comm.world() + (tasks % comm.world() ? 1 : 0), threads, c.threads_per_task);
    std::vector<double> seconds(mine.size(), 0.0), scores(mine.size(), 0.0);
    comm.barrier();
    const auto start = Clock::now();
    run_tasks(static_cast<int64_t>(mine.size()), plan, [&](int64_t k, int task_threads) {
      const auto t0 = Clock::now();
      const int64_t model = mine[k] / c.folds;
      const auto fold = static_cast<int32_t>(mine[k] % c.folds);
      FitOptions fo;
      fo.params = with_defaults(c.backend, models[model]);
      fo.kind = d.kind;
      fo.classes = d.classes;
      fo.threads = task_threads;
      fo.seed = c.seed + static_cast<uint64_t>(mine[k]);
      const auto m = fit_model(c.backend, train[fold], fo);
      scores[k] = score(c.metric, eval[fold].y, m->predict(eval[fold]), d.classes);
      seconds[k] = std::chrono::duration<double>(Clock::now() - t0).count();
    });
    comm.barrier();
    double wall = std::chrono::duration<double>(Clock::now() - start).count();
    double sums[1] = {0};
    for (double s : seconds) sums[0] += s;
    comm.allreduce_sum(sums, 1);
    comm.broadcast_bytes(&wall, sizeof wall, 0);
    // The best model's mean score over folds (each model's folds may sit on several ranks).
    std::vector<double> per_model(static_cast<size_t>(n), 0.0);
    for (size_t k = 0; k < mine.size(); ++k) per_model[mine[k] / c.folds] += scores[k] / static_cast<double>(c.folds);
    comm.allreduce_sum(per_model.data(), n);
    double best = per_model[0];
    for (double v : per_model)
      if (better(c.metric, v, best)) best = v;
    ScalingRow r;
    r.models = n;
    r.tasks = tasks;
    r.threads = plan.workers * plan.threads_per_task * comm.world();
    r.threads_per_task = plan.threads_per_task;
    r.wall_seconds = wall;
    r.serial_seconds = sums[0];
    r.speedup = wall > 0 ? sums[0] / wall : 0;
    r.efficiency = r.threads > 0 ? r.speedup / r.threads : 0;
    r.best_score = best;
    rows.push_back(r);
    if (comm.rank() == 0 && !quiet) {
      std::printf("%lld models (%lld tasks): %.3f s wall, %.3f s serial-equivalent, speedup %.2f on %d threads\n",
                  static_cast<long long>(n), static_cast<long long>(tasks), wall, sums[0], r.speedup, r.threads);
      std::fflush(stdout);
    }
  }
  return rows;
}

std::string format_scaling_table(const std::vector<ScalingRow>& rows) {
  std::string out = fmt::format("{:>8} {:>8} {:>8} {:>12} {:>12} {:>9} {:>11}\n", "models", "tasks", "threads",
                                "wall_s", "serial_s", "speedup", "efficiency");
  for (const auto& r : rows)
    out += fmt::format("{:>8} {:>8} {:>8} {:>12.4f} {:>12.4f} {:>9.2f} {:>11.3f}\n", r.models, r.tasks, r.threads,
                       r.wall_seconds, r.serial_seconds, r.speedup, r.efficiency);
  return out;
}

void write_scaling(const StudyConfig& c, const Dataset& d, const std::vector<ScalingRow>& rows, int ranks) {
  namespace fs = std::filesystem;
  fs::create_directories(c.dir);
  std::string csv = "models,tasks,threads,threads_per_task,wall_seconds,serial_seconds,speedup,efficiency,best_score\n";
  nlohmann::json list = nlohmann::json::array();
  for (const auto& r : rows) {
    csv += fmt::format("{},{},{},{},{:.6f},{:.6f},{:.4f},{:.4f},{:.9g}\n", r.models, r.tasks, r.threads,
                       r.threads_per_task, r.wall_seconds, r.serial_seconds, r.speedup, r.efficiency, r.best_score);
    list.push_back({{"models", r.models}, {"tasks", r.tasks}, {"threads", r.threads},
                    {"threads_per_task", r.threads_per_task}, {"wall_seconds", r.wall_seconds},
                    {"serial_seconds", r.serial_seconds}, {"speedup", r.speedup},
                    {"efficiency", r.efficiency}, {"best_score", number_or_null(r.best_score)}});
  }
  const nlohmann::json doc = {{"format", "aiscale-tune-scaling"}, {"version", 1}, {"name", c.name},
                              {"backend", backend_name(c.backend)}, {"metric", metric_name(c.metric)},
                              {"folds", c.folds}, {"ranks", ranks},
                              {"data", {{"source", d.source}, {"rows", d.rows}, {"features", d.features}}},
                              {"date", utc_iso8601()}, {"host", host_name()}, {"cpu", cpu_model_name()},
                              {"rows", list}};
  atomic_write_file((fs::path(c.dir) / "scaling.csv").string(), csv);
  atomic_write_file((fs::path(c.dir) / "scaling.json").string(), doc.dump(2) + "\n");
}

}  // namespace aiscale::tune
