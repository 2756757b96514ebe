// aiscale bench: benchmarks that print one JSON line per result.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>

#include "aiscale/bench/allreduce.h"
#include "aiscale/bench/language.h"
#include "aiscale/profile/profile_report.h"
#include "aiscale/train/environment.h"
#include "aiscale/cli/commands.h"
#include "aiscale/cli/options.h"
#include "aiscale/cli/run_options.h"
#include "aiscale/core/error.h"
#include "aiscale/core/fs.h"
#include "aiscale/parallel/comm.h"
#include "aiscale/train/config.h"

namespace aiscale::cli {
namespace {

void append_json_line(const std::string& path, const nlohmann::json& j) {
  if (path.empty()) return;
  std::ofstream out(path, std::ios::app);
  if (!out) fail("cannot append to results file '{}': check the folder exists and is writable", path);
  out << j.dump() << "\n";
}

// A benchmark's run directory: created if missing; one holding a result is refused.
void prepare_bench_run_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  if (fs::exists(fs::path(dir) / "bench.jsonl"))
    fail("--run-dir '{}' already holds a benchmark result (bench.jsonl): choose another folder "
         "or remove it", dir);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) fail("--run-dir '{}': cannot create it: {}", dir, ec.message());
}

struct LanguageArgs {
  bench::LanguageBenchOptions o;
  RunOptions run;  // model, batch, device, parallel settings: the train config's keys
  std::string output;
  std::string run_dir;
  std::optional<int64_t> profile;
};

// The run settings as a train config: its defaults, the options, and the schema's checks
// (the one mapping from options to settings, shared with `aiscale train`).
train::TrainConfig bench_config(const RunOptions& run) {
  try {
    return train::parse_train_config("", "aiscale bench language", run.overrides());
  } catch (const Error& e) {
    throw Error(with_option_names(e.what()));
  }
}

std::vector<std::string> bench_run_keys() {
  std::vector<std::string> keys = run_option_keys();
  // Every run setting but train.steps (the benchmark's --steps counts timed steps) and the
  // metrics outputs of a training run's directory.
  for (const char* k : {"train.steps", "run.tensorboard", "run.mllog"})
    keys.erase(std::remove(keys.begin(), keys.end(), k), keys.end());
  return keys;
}

struct AllreduceArgs {
  bench::AllreduceBenchOptions o;
  std::string output;
  std::string rendezvous = "auto";
  double timeout_s = 300;
};

void add_allreduce_command(CLI::App* bench) {
  auto args = std::make_shared<AllreduceArgs>();
  auto* ar = bench->add_subcommand(
      "allreduce",
      "All-reduce bandwidth over message sizes, like nccl-tests: in-place fp32 sum, one JSON line "
      "per size with time, algbw and busbw = algbw*2(n-1)/n (run one rank per GPU through "
      "aiscale launch, mpirun or srun)");
  ar->add_option("--backend", args->o.backend, "nccl (GPU buffers) or mpi (host buffers)")
      ->capture_default_str()->check(CLI::IsMember({"nccl", "mpi"}));
  ar->add_option("--min-bytes", args->o.min_bytes, "smallest message")->capture_default_str()
      ->check(integer_in(1, int64_t{1} << 40));
  ar->add_option("--max-bytes", args->o.max_bytes, "largest message")->capture_default_str()
      ->check(integer_in(1, int64_t{1} << 40));
  ar->add_option("--step-factor", args->o.step_factor, "size multiplier between messages (2 or 4 ...)")
      ->capture_default_str();
  ar->add_option("--iters", args->o.iters, "timed all-reduces per size")->capture_default_str()
      ->check(positive_number());
  ar->add_option("--warmup", args->o.warmup, "untimed all-reduces per size first")->capture_default_str()
      ->check(number_in(0));
  ar->add_option("--repeats", args->o.repeats, "timed loops of --iters per size (the median counts)")
      ->capture_default_str()->check(positive_number());
  ar->add_option("--system", args->o.system, "machine name for the records (default: $SLURM_CLUSTER_NAME)");
  ar->add_option("--nodes", args->o.nodes, "nodes for the records (default: $SLURM_JOB_NUM_NODES)");
  ar->add_flag("!--no-check", args->o.check, "skip checking one all-reduce per size against the exact sum");
  ar->add_option("--rendezvous", args->rendezvous, "nccl: auto, mpi, file:/shared/path or tcp://host:port")->capture_default_str();
  ar->add_option("--timeout", args->timeout_s, "seconds before a stalled collective fails the rank")
      ->capture_default_str()->check(number_in(0.001, 2592000));
  ar->add_option("--output,-o", args->output, "also append the JSON lines to this file");
  ar->callback([args] {
    bench::allreduce_bench_sizes(args->o);  // a bad range fails before any set-up
    parallel::CommOptions co;
    co.kind = args->o.backend;
    co.device = args->o.backend == "nccl" ? "cuda" : "cpu";
    co.rendezvous = args->rendezvous;
    co.timeout_s = args->timeout_s;
    auto comm = parallel::make_communicator(co);
    bench::run_allreduce_bench(args->o, *comm, [&](const nlohmann::json& j) {
      std::printf("%s\n", j.dump().c_str());
      std::fflush(stdout);
      append_json_line(args->output, j);
    });
  });
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto* bench = app.add_subcommand("bench", "Benchmarks: each prints one JSON line per result");
  bench->require_subcommand(1);

  auto args = std::make_shared<LanguageArgs>();
  auto* lang = bench->add_subcommand(
      "language",
      "GPT training throughput on synthetic tokens: tokens/s, achieved FLOP/s (6N + 12*L*C*T "
      "per token), MFU on GPUs, median and p90 step time, peak memory");
  add_run_options(lang, args->run, bench_run_keys(),
                  "Run settings (the train config's keys; default: the config's defaults)");
  lang->add_option("--steps", args->o.steps, "timed steps")->capture_default_str()->check(positive_number());
  lang->add_option("--warmup", args->o.warmup, "untimed steps first")->capture_default_str()->check(number_in(0));
  lang->add_option("--output,-o", args->output, "also append the JSON line to this file");
  lang->add_option("--run-dir", args->run_dir,
                   "write a run directory: DIR/bench.jsonl (the record) and DIR/steps.jsonl (every "
                   "rank's per-step records; docs/guide/scaling.md); DIR must not hold a result yet");
  lang->add_option("--baseline-tokens-per-s", args->o.baseline_tokens_per_s,
                   "tokens/s of a 1-device run of the same workload: adds scaling_efficiency = "
                   "tokens/s per device / this")
      ->check(number_in(0));
  lang->add_option_function<int64_t>(
         "--profile", [args](int64_t n) { args->profile = n; },
         "profile the first STEPS timed steps: an op table (printed, and op_table.{json,md}) "
         "and a Chrome trace-event file for Perfetto (trace.json), in --run-dir DIR or beside "
         "--output FILE (FILE.trace.json, ...); see docs/guide/observability.md")
      ->type_name("STEPS");
  lang->callback([args] {
    bench::LanguageBenchOptions o = args->o;
    o.run = bench_config(args->run);
    if (args->profile) {
      o.profile_steps = *args->profile;
      profile::check_profile_steps(o.profile_steps, o.steps, o.warmup, "--steps");
      if (!args->run_dir.empty()) {
        o.profile_dir = args->run_dir;
      } else if (!args->output.empty()) {
        const std::filesystem::path out(args->output);
        o.profile_dir = out.has_parent_path() ? out.parent_path().string() : ".";
        o.profile_stem = out.filename().string() + ".";
      } else {
        fail("--profile {}: say where the profile goes: --run-dir DIR (DIR/trace.json, "
             "DIR/op_table.md) or --output FILE (FILE.trace.json, FILE.op_table.md beside it)",
             o.profile_steps);
      }
      profile::check_writable_dir(o.profile_dir, args->run_dir.empty() ? "--output" : "--run-dir");
    }
    const train::TrainConfig& c = o.run;
    // Before the model: a GPU rank's communicator also selects the rank's GPU.
    parallel::CommOptions co;
    co.kind = c.communicator;
    co.device = c.device;
    co.rendezvous = c.rendezvous;
    auto comm = parallel::make_communicator(co);
    if (!args->run_dir.empty()) {
      o.steps_dir = args->run_dir;
      if (comm->rank() == 0) prepare_bench_run_dir(args->run_dir);
      train::write_environment(args->run_dir, *comm, c.device, train::to_toml(c));
    }
    nlohmann::json j = bench::run_language_bench(o, *comm);
    if (comm->rank() == 0) {
      std::printf("%s\n", j.dump().c_str());
      std::fflush(stdout);
      append_json_line(args->output, j);
      // Written last: its presence marks a finished benchmark run.
      if (!args->run_dir.empty())
        atomic_write_file((std::filesystem::path(args->run_dir) / "bench.jsonl").string(), j.dump() + "\n");
    }
  });

  add_allreduce_command(bench);
}

}  // namespace aiscale::cli
