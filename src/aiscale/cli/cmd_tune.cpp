// `aiscale tune`: hyperparameter search (random or grid, k-fold cross-validation,
// successive halving) over the engine's MLP or XGBoost, on this node's threads and across
// MPI ranks; or the scaling table of many models (--scaling).
//   aiscale tune study.toml [--set study.trials=50] [--fresh] [--scaling 1,100,1000]
//   aiscale tune --synthetic-csv data.csv [--rows 100000] [--seed 1]
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "aiscale/cli/commands.h"
#include "aiscale/cli/help_text.h"
#include "aiscale/cli/options.h"
#include "aiscale/core/error.h"
#include "aiscale/core/fs.h"
#include "aiscale/core/log.h"
#include "aiscale/core/validate.h"
#include "aiscale/parallel/comm.h"
#include "aiscale/sweep/train_search.h"
#include "aiscale/tune/scaling.h"
#include "aiscale/tune/study.h"

namespace aiscale::cli {
namespace {

struct TuneArgs {
  std::string config;
  std::vector<std::string> overrides;
  std::string scaling;
  int64_t threads = -1;
  int64_t threads_per_task = -1;
  bool fresh = false;
  bool quiet = false;
  std::string shard;  // "K/N" or "array"
  std::string synthetic_csv;
  int64_t rows = 100000;
  double noise = 0.1;
  uint64_t seed = 1;
};

void print_outcome(const tune::StudyConfig& c, const tune::StudyOutcome& out) {
  const char* metric = tune::metric_name(c.metric);
  std::printf("default hyperparameters: %s %.6g (+- %.3g over %lld folds)\n", metric, out.defaults.score,
              out.defaults.score_std, static_cast<long long>(out.defaults.folds));
  std::string params;
  for (const auto& [k, v] : out.best.params) params += fmt::format(" {}={}", k, tune::value_text(v));
  std::printf("best: trial %lld, %s %.6g (+- %.3g), %s the default;%s\n", static_cast<long long>(out.best.trial),
              metric, out.best.score, out.best.score_std,
              tune::better(c.metric, out.best.score, out.defaults.score) ? "better than" : "not better than",
              params.c_str());
  std::printf("%lld tasks run, %lld resumed, %.2f s -> %s (results.csv, results.json, best/)\n",
              static_cast<long long>(out.tasks_run), static_cast<long long>(out.tasks_resumed), out.wall_seconds,
              out.dir.c_str());
  std::fflush(stdout);
}

void run_on_ranks(const TuneArgs& a, const tune::StudyConfig& c, const tune::Dataset& data,
                  const std::vector<int64_t>& counts, parallel::Communicator& comm);

// "K/N", or "array": this job's place in a Slurm job array (sbatch --array=...).
std::pair<int64_t, int64_t> parse_shard(const std::string& text) {
  if (text == "array") {
    const auto id = validate::env_int("SLURM_ARRAY_TASK_ID", 0, 10000000);
    const auto count = validate::env_int("SLURM_ARRAY_TASK_COUNT", 1, 10000000);
    if (!id || !count)
      fail("--shard array: SLURM_ARRAY_TASK_ID and SLURM_ARRAY_TASK_COUNT are not set: submit the "
           "job with sbatch --array=0-N (N + 1 jobs), or give --shard K/N");
    const int64_t first = validate::env_int("SLURM_ARRAY_TASK_MIN", 0, 10000000).value_or(0);
    if (*id - first >= *count)
      fail("--shard array: SLURM_ARRAY_TASK_ID = {} is not within the {} tasks of the array from {}: "
           "use a contiguous array (sbatch --array=0-{})", *id, *count, first, *count - 1);
    return {*id - first, *count};
  }
  const size_t slash = text.find('/');
  if (slash == std::string::npos)
    fail("--shard '{}': write K/N (this job runs share K of N, K from 0) or array", text);
  const int64_t n = validate::parse_int(text.substr(slash + 1), 1, 10000000, "--shard (N of K/N)");
  const int64_t k = validate::parse_int(text.substr(0, slash), 0, 10000000, "--shard (K of K/N)");
  if (k >= n) fail("--shard {}: K must be below N (the shares are numbered 0 to {})", text, n - 1);
  return {k, n};
}

std::string config_text(const TuneArgs& a) {
  std::string text = read_file(a.config);
  for (const auto& o : a.overrides) text += "\n# --set " + o;
  return text;
}

// A study of training runs: its trials are `aiscale train` processes (sweep/train_search.h).
void run_train_study(const TuneArgs& a, const tune::StudyConfig& c) {
  for (auto [given, what] : {std::pair{!a.scaling.empty(), "--scaling"}, std::pair{!a.shard.empty(), "--shard"},
                             std::pair{a.threads >= 0, "--threads"}, std::pair{a.threads_per_task >= 0, "--threads-per-task"}})
    if (given)
      fail("{} belongs to mlp and xgboost studies; {} is a study of training runs (study.backend = \"train\"): "
           "its trials are placed by [train] (parallel_trials, ranks_per_trial, threads_per_rank)", what, a.config);
  // A Slurm batch script (SLURM_JOB_ID without SLURM_STEP_ID) carries the allocation's task
  // count without being one of several ranks: the study runs there, its trials as job steps.
  const bool slurm_batch = std::getenv("SLURM_JOB_ID") && !std::getenv("SLURM_STEP_ID");
  if (!slurm_batch && parallel::launched_world_size() > 1)
    fail("aiscale tune {}: a study of training runs starts its trials' ranks itself ([train] ranks_per_trial, "
         "parallel_trials); run it as one process, not under mpirun, srun or aiscale launch", a.config);
  sweep::TrainSearchOptions o;
  o.fresh = a.fresh;
  o.quiet = a.quiet;
  o.study_text = config_text(a);
  const sweep::TrainSearchOutcome out = sweep::run_train_search(c, o);
  const auto& def = out.trials.front();
  int64_t finished = 0, stopped = 0, failed = 0;
  for (const auto& t : out.trials) {
    if (t.trial < 0) continue;
    finished += t.status == "finished";
    stopped += t.status == "stopped";
    failed += t.status == "failed" || t.status == "diverged";
  }
  std::printf("%lld trial(s): %lld finished, %lld stopped early, %lld failed or diverged; %lld started, %lld resumed, "
              "%lld done before; %.1f s, %lld at a time, the slots busy %.0f%% of the time (training steps %.0f%%)\n",
              static_cast<long long>(out.trials.size() - 1), static_cast<long long>(finished),
              static_cast<long long>(stopped), static_cast<long long>(failed), static_cast<long long>(out.started),
              static_cast<long long>(out.resumed), static_cast<long long>(out.skipped), out.wall_seconds,
              static_cast<long long>(out.parallel_trials), 100 * out.busy_share, 100 * out.step_share);
  if (out.interrupted) {
    std::printf("interrupted: run `aiscale tune %s` again to resume (finished trials are not run again)\n",
                a.config.c_str());
    std::fflush(stdout);
    return;
  }
  std::printf("default configuration: validation loss %s (%s)\n",
              std::isfinite(def.val_loss) ? fmt::format("{:.4f}", def.val_loss).c_str() : "none",
              sweep::trial_status_text(def).c_str());
  if (out.best < 0) {
    std::fflush(stdout);
    fail("no trial of {} finished ({} failed or diverged, {} stopped early): see {}/results.csv and the logs "
         "under {}/trials", a.config, failed, stopped, out.dir, out.dir);
  }
  const auto& best = out.trials[static_cast<size_t>(out.best + 1)];
  std::string keys;
  for (const auto& [k, v] : best.params) keys += fmt::format(" {}={}", k, tune::value_text(v));
  std::printf("best: %s, validation loss %.4f, %s the default;%s\n-> %s (results.csv, results.json, "
              "best/config.toml)\n", best.name.c_str(), best.val_loss,
              !std::isfinite(def.val_loss) || best.val_loss < def.val_loss ? "better than" : "not better than",
              keys.c_str(), out.dir.c_str());
  std::fflush(stdout);
}

void run_tune(const TuneArgs& a) {
  if (!a.synthetic_csv.empty()) {
    validate::in_range(a.rows, int64_t{1}, int64_t{100000000}, "--rows");
    validate::in_range(a.noise, 0.0, 1e6, "--noise");
    const tune::Dataset d = tune::synthetic_regression(a.rows, a.noise, a.seed);
    tune::write_csv(d, a.synthetic_csv);
    std::printf("synthetic regression: %lld rows, 6 features (x1..x6), target y -> %s\n",
                static_cast<long long>(d.rows), a.synthetic_csv.c_str());
    return;
  }
  if (a.config.empty())
    fail("aiscale tune needs a study file (e.g. configs/tune/synthetic_mlp.toml), or --synthetic-csv FILE");
  validate::omp_num_threads_env();
  const tune::TrainKeyCatalogue train_keys = sweep::train_key_catalogue();
  tune::StudyConfig c = tune::load_study_config(a.config, a.overrides, &train_keys);
  if (c.backend == tune::Backend::train) {
    run_train_study(a, c);
    return;
  }
  if (a.threads >= 0) c.threads = validate::thread_count(a.threads, "--threads");
  if (a.threads_per_task >= 0) c.threads_per_task = validate::in_range(a.threads_per_task, int64_t{0}, validate::kMaxThreads, "--threads-per-task");
  if (!a.shard.empty() && (a.fresh || !a.scaling.empty()))
    fail("--shard runs a share of a study's tasks beside other jobs: it cannot be combined with "
         "{} (start the study over without --shard first)", a.fresh ? "--fresh" : "--scaling");
  std::vector<int64_t> counts;
  if (!a.scaling.empty()) counts = tune::parse_model_counts(a.scaling);  // checked before any work
  const tune::Dataset data = tune::load_study_data(c);
  tune::check_against_data(c, data);  // the task and metric the data implies, for the summary
  auto comm = parallel::make_communicator("auto");
  try {
    run_on_ranks(a, c, data, counts, *comm);
  } catch (const Error& e) {
    // One rank's failure (a study directory of another configuration, a library error)
    // must not leave the others waiting in a collective.
    if (comm->world() > 1) {
      log::error("rank {}: {}", comm->rank(), e.what());
      comm->abort(1);
    }
    throw;
  }
}

void run_on_ranks(const TuneArgs& a, const tune::StudyConfig& c, const tune::Dataset& data,
                  const std::vector<int64_t>& counts, parallel::Communicator& comm) {
  if (!counts.empty()) {
    const auto rows = tune::run_scaling(c, data, counts, comm, a.quiet);
    if (comm.rank() == 0) {
      tune::write_scaling(c, data, rows, comm.world());
      std::printf("%s-> %s/scaling.csv, %s/scaling.json\n", tune::format_scaling_table(rows).c_str(),
                  c.dir.c_str(), c.dir.c_str());
      std::fflush(stdout);
    }
    return;
  }
  tune::RunOptions o;
  if (!a.shard.empty()) std::tie(o.shard, o.shards) = parse_shard(a.shard);
  o.fresh = a.fresh;
  o.quiet = a.quiet;
  o.config_text = config_text(a);
  const tune::StudyOutcome out = tune::run_study(c, data, comm, o);
  if (comm.rank() != 0) return;
  if (!out.merged) {
    std::printf("shard %lld/%lld: %lld tasks run, %lld resumed, %.2f s -> %s/tasks; once every shard "
                "has finished, run aiscale tune %s without --shard to merge the results\n",
                static_cast<long long>(o.shard), static_cast<long long>(o.shards),
                static_cast<long long>(out.tasks_run), static_cast<long long>(out.tasks_resumed),
                out.wall_seconds, c.dir.c_str(), a.config.c_str());
    std::fflush(stdout);
    return;
  }
  print_outcome(c, out);
  // A trial whose model diverged scores NaN and ranks last; a search in which every trial
  // did has no result, and the exit status says so.
  int64_t diverged = 0;
  for (const auto& t : out.trials) diverged += std::isfinite(t.score) ? 0 : 1;
  if (diverged > 0 && diverged < static_cast<int64_t>(out.trials.size()))
    std::printf("%lld of %zu trial(s) diverged (score NaN, ranked last)\n", static_cast<long long>(diverged),
                out.trials.size());
  std::fflush(stdout);
  if (!out.trials.empty() && diverged == static_cast<int64_t>(out.trials.size()))
    fail("every one of the {} trial(s) of {} diverged (score NaN; see {}/results.csv): the search "
         "found nothing; narrow the ranges that make training unstable (a lower [params.lr] or "
         "[fixed] lr, fewer epochs) or check the data ([data])",
         out.trials.size(), a.config, c.dir);
}

}  // namespace

void add_tune_command(CLI::App& app) {
  const HelpSection help("tune", "tune");
  auto a = std::make_shared<TuneArgs>();
  auto* cmd = app.add_subcommand("tune", help.about());
  help.option(cmd, "config", a->config);
  help.option(cmd, "--set,-s", a->overrides);
  help.option(cmd, "--scaling", a->scaling);
  help.option(cmd, "--threads", a->threads)->check(thread_count());
  help.option(cmd, "--threads-per-task", a->threads_per_task)->check(thread_count());
  help.flag(cmd, "--fresh", a->fresh);
  help.flag(cmd, "-q,--quiet", a->quiet);
  help.option(cmd, "--shard", a->shard);
  help.option(cmd, "--synthetic-csv", a->synthetic_csv);
  help.option(cmd, "--rows", a->rows)->check(integer_in(1, 100'000'000));
  help.option(cmd, "--noise", a->noise);
  help.option(cmd, "--seed", a->seed)->check(integer_in(0, std::numeric_limits<int64_t>::max()));
  cmd->footer(help.footer());
  cmd->callback([a] { run_tune(*a); });
}

}  // namespace aiscale::cli
