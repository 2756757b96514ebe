// aiscale bench: benchmarks that print one JSON line per result.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>

#include "aiscale/bench/allreduce.h"
#include "aiscale/bench/language.h"
#include "aiscale/bench/machine.h"
#include "aiscale/bench/loader.h"
#include "aiscale/train/environment.h"
#include "aiscale/cli/commands.h"
#include "aiscale/cli/help_text.h"
#include "aiscale/cli/options.h"
#include "aiscale/cli/run_options.h"
#include "aiscale/core/error.h"
#include "aiscale/core/fs.h"
#include "aiscale/parallel/comm.h"
#include "aiscale/parallel/rank_failure.h"
#include "aiscale/train/config.h"
#include "aiscale/train/parallel_layout.h"
#include "aiscale/train/profile_report.h"

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
  // The benchmark measures data parallelism (with ZeRO), tensor parallelism and pipeline
  // stages; the metrics outputs belong to a training run's directory.
  for (const char* k : {"train.steps", "train.init_from", "run.tensorboard", "run.mllog",
                        // the gradient exchange's choices are measured by aiscale train and
                        // bench allreduce --algorithm
                        "parallel.allreduce", "parallel.ranks_per_node", "parallel.grad_mixing",
                        "parallel.compression", "parallel.topk_ratio",
                        // asynchronous training is a mode of aiscale train only
                        "parallel.parameter_servers", "parallel.max_staleness"})
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
  const HelpSection help("bench", "allreduce");
  auto args = std::make_shared<AllreduceArgs>();
  auto* ar = bench->add_subcommand("allreduce", help.about());
  help.option(ar, "--backend", args->o.backend)
      ->capture_default_str()->check(CLI::IsMember({"nccl", "mpi", "tcp"}));
  help.option(ar, "--algorithm", args->o.algorithm)
      ->capture_default_str()->check(CLI::IsMember({"library", "ring", "hierarchical"}));
  help.option(ar, "--ranks-per-node", args->o.ranks_per_node)
      ->capture_default_str()->check(integer_in(0, 1 << 20));
  help.option(ar, "--min-bytes", args->o.min_bytes)->capture_default_str()
      ->check(integer_in(1, int64_t{1} << 40));
  help.option(ar, "--max-bytes", args->o.max_bytes)->capture_default_str()
      ->check(integer_in(1, int64_t{1} << 40));
  help.option(ar, "--step-factor", args->o.step_factor)
      ->capture_default_str()->check(integer_in(2, 1024));
  help.option(ar, "--iters", args->o.iters)->capture_default_str()->check(integer_in(1, 1'000'000));
  help.option(ar, "--warmup", args->o.warmup)->capture_default_str()
      ->check(integer_in(0, 1'000'000));
  help.option(ar, "--repeats", args->o.repeats)
      ->capture_default_str()->check(integer_in(1, 10'000));
  help.option(ar, "--system", args->o.system);
  help.option(ar, "--nodes", args->o.nodes)->check(integer_in(0, 1'000'000));
  help.flag(ar, "!--no-check", args->o.check);
  help.option(ar, "--rendezvous", args->rendezvous)->capture_default_str();
  help.option(ar, "--timeout", args->timeout_s)
      ->capture_default_str()->check(number_in(0.001, 2592000));
  help.option(ar, "--output,-o", args->output);
  ar->callback([args] {
    bench::allreduce_bench_sizes(args->o);  // a bad range fails before any set-up
    parallel::CommOptions co;
    co.kind = args->o.backend;
    co.device = args->o.backend == "nccl" ? "cuda" : "cpu";
    co.rendezvous = args->rendezvous;
    co.timeout_s = args->timeout_s;
    co.allreduce = args->o.algorithm;
    co.ranks_per_node = static_cast<int>(args->o.ranks_per_node);
    auto comm = parallel::make_communicator(co);
    check_output_before_measuring(*comm, args->output, "--output");
    bench::run_allreduce_bench(args->o, *comm, [&](const nlohmann::json& j) {
      std::printf("%s\n", j.dump().c_str());
      std::fflush(stdout);
      append_json_line(args->output, j);
    });
  });
}

struct MachineArgs {
  bench::MachineBenchOptions o;
  std::string output;  // the profile (TOML)
  std::string jsonl;   // also append the JSON lines here
  std::string rendezvous = "auto";
};

void add_machine_command(CLI::App* bench) {
  const HelpSection help("bench", "machine");
  auto args = std::make_shared<MachineArgs>();
  auto* m = bench->add_subcommand("machine", help.about());
  help.option(m, "--device", args->o.device)
      ->capture_default_str()->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  help.option(m, "--model", args->o.model)->capture_default_str();
  help.option(m, "--batch", args->o.batch)->check(integer_in(1, 1 << 20));
  help.option(m, "--seq", args->o.seq)->check(integer_in(1, 1 << 20));
  help.option(m, "--max-size", args->o.max_size)->check(integer_in(16, 1 << 16));
  help.option(m, "--stream-mib", args->o.stream_mib)->check(integer_in(1, 1 << 16));
  help.option(m, "--allreduce-bytes", args->o.allreduce_bytes)
      ->check(integer_in(4, int64_t{1} << 40));
  help.option(m, "--repeats", args->o.repeats)->check(integer_in(1, 1000));
  help.option(m, "--threads", args->o.threads)->check(integer_in(0, 1 << 16));
  help.flag(m, "--quick", args->o.quick);
  help.option(m, "--output,-o", args->output);
  help.option(m, "--jsonl", args->jsonl);
  help.option(m, "--rendezvous", args->rendezvous)->capture_default_str();
  m->footer(help.footer());
  m->callback([args] {
    parallel::CommOptions co;
    co.device = bench::machine_bench_device(args->o.device);
    co.rendezvous = args->rendezvous;
    auto comm = parallel::make_communicator(co);
    // Both outputs, and the sizes against the memory (in run_machine_bench), before the
    // minutes of measuring.
    check_output_before_measuring(*comm, args->output, "--output");
    check_output_before_measuring(*comm, args->jsonl, "--jsonl");
    bench::MachineBenchOptions o = args->o;
    o.device = co.device;
    o.command = bench::this_command_line();
    plan::MachineProfile p = bench::run_machine_bench(o, *comm, [&](const nlohmann::json& j) {
      std::printf("%s\n", j.dump().c_str());
      std::fflush(stdout);
      append_json_line(args->jsonl, j);
    });
    if (comm->rank() == 0 && !args->output.empty()) {
      plan::write_machine_profile(args->output, p);
      std::fprintf(stderr, "bench machine: profile written to %s\n", args->output.c_str());
    }
  });
}

struct LoaderArgs {
  bench::LoaderBenchOptions o;
  std::string size = "500x375";
  std::string roi_decode = "on";
  std::string output;
};

void add_loader_command(CLI::App* bench) {
  const HelpSection help("bench", "loader");
  auto args = std::make_shared<LoaderArgs>();
  auto* loader = bench->add_subcommand("loader", help.about());
  help.option(loader, "--data", args->o.data);
  help.option(loader, "--synthetic", args->o.synthetic)
      ->capture_default_str()->check(integer_in(1, 10'000'000));
  help.option(loader, "--size", args->size)->capture_default_str();
  help.option(loader, "--classes", args->o.classes)->capture_default_str()
      ->check(integer_in(1, 1'000'000));
  help.option(loader, "--workdir", args->o.workdir);
  help.option(loader, "--crop", args->o.crop)->capture_default_str()->check(integer_in(1, 65535));
  help.option(loader, "--batch", args->o.batch_size)->capture_default_str()
      ->check(integer_in(1, 1'000'000));
  help.option(loader, "--threads", args->o.threads)->delimiter(',')->check(integer_in(1, 4096));
  help.option(loader, "--batches", args->o.batches)->capture_default_str()
      ->check(integer_in(1, 1'000'000));
  help.option(loader, "--warmup", args->o.warmup)->capture_default_str()
      ->check(integer_in(0, 1'000'000));
  help.flag(loader, "!--validation", args->o.train);
  help.option(loader, "--stage", args->o.stage)->capture_default_str();
  help.option(loader, "--layout", args->o.layout)->capture_default_str()
      ->check(CLI::IsMember({"nchw", "nhwc"}));
  help.option(loader, "--roi-decode", args->roi_decode)
      ->capture_default_str()->check(CLI::IsMember({"on", "off"}));
  help.flag(loader, "--skip-corrupt", args->o.skip_corrupt);
  help.option(loader, "--gpu-images-per-s", args->o.gpu_images_per_s)->check(number_in(0));
  help.option(loader, "--output,-o", args->output);
  loader->callback([args] {
    bench::LoaderBenchOptions o = args->o;
    o.roi_decode = args->roi_decode == "on";
    const std::string& size = args->size;
    const size_t x = size.find('x');
    try {
      o.synthetic_width = std::stoll(size.substr(0, x));
      o.synthetic_height = x == std::string::npos ? o.synthetic_width : std::stoll(size.substr(x + 1));
    } catch (const std::exception&) {
      fail("--size '{}': give WxH (e.g. 500x375) or one side (e.g. 256)", size);
    }
    if (!args->output.empty()) check_output_file(args->output, "--output");
    bench::run_loader_bench(o, [&](const nlohmann::json& j) {
      std::printf("%s\n", j.dump().c_str());
      std::fflush(stdout);
      append_json_line(args->output, j);
    });
  });
}

}  // namespace

// A typo in an output path must not cost the measurement.
void check_output_before_measuring(parallel::Communicator& comm, const std::string& path,
                                   const std::string& what) {
  if (path.empty()) return;
  std::string why;
  if (comm.rank() == 0) {
    try {
      check_output_file(path, what);
    } catch (const Error& e) {
      why = e.what();
    }
  }
  char failed = why.empty() ? 0 : 1;
  if (comm.world() > 1) comm.broadcast_bytes(&failed, 1, 0);
  if (failed) throw parallel::AlikeOnEveryRank(why.empty() ? what + " cannot be written" : why);
}

void add_bench_command(CLI::App& app) {
  const HelpSection bench_help("bench", "bench");
  const HelpSection language_help("bench", "language");
  auto* bench = app.add_subcommand("bench", bench_help.about());
  bench->require_subcommand(1);

  auto args = std::make_shared<LanguageArgs>();
  auto* lang = bench->add_subcommand("language", language_help.about());
  add_run_options(lang, args->run, bench_run_keys(),
                  "Run settings (the train config's keys; default: the config's defaults)");
  // Whole numbers checked as such: a real-number check let 1e20 through, which CLI11 then
  // kept as the largest 64-bit integer.
  language_help.option(lang, "--steps", args->o.steps)->capture_default_str()
      ->check(integer_in(1, int64_t{1} << 40));
  language_help.option(lang, "--warmup", args->o.warmup)->capture_default_str()
      ->check(integer_in(0, int64_t{1} << 40));
  language_help.option(lang, "--output,-o", args->output);
  language_help.option(lang, "--run-dir", args->run_dir);
  language_help.option(lang, "--baseline-tokens-per-s", args->o.baseline_tokens_per_s)
      ->check(number_in(0));
  lang->add_option_function<int64_t>(
         "--profile", [args](int64_t n) { args->profile = n; }, language_help.of("--profile"))
      ->type_name("STEPS");
  lang->callback([args] {
    bench::LanguageBenchOptions o = args->o;
    o.run = bench_config(args->run);
    if (args->profile) {
      o.profile_steps = *args->profile;
      train::check_profile_steps(o.profile_steps, o.steps, o.warmup, "--steps");
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
      train::check_writable_dir(o.profile_dir, args->run_dir.empty() ? "--output" : "--run-dir");
    }
    const train::TrainConfig& c = o.run;
    try {  // alike on every rank, before any communicator: rank 0 alone says why
      train::parallel_layout(c, c.communicator == "none" ? 1 : parallel::launched_world_size());
    } catch (const Error& e) {
      throw parallel::AlikeOnEveryRank(e.what());
    }
    // Before the model: a GPU rank's communicator also selects the rank's GPU.
    parallel::CommOptions co;
    co.kind = c.communicator;
    co.device = c.device;
    co.rendezvous = c.rendezvous;
    // Held outside the work, so that a failure is printed (and the peers ended) before the
    // communicator goes (parallel/rank_failure.h).
    parallel::RankContext context;
    context.comm = parallel::make_communicator(co);
    auto& comm = context.comm;
    try {
      if (comm->rank() == 0 && !args->output.empty()) check_output_file(args->output, "--output");
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
    } catch (...) {
      parallel::report_rank_failure(context);
    }
  });

  add_allreduce_command(bench);
  add_machine_command(bench);
  add_loader_command(bench);
  add_bench_vision_command(bench);
  add_bench_sample_command(bench);
}

}  // namespace aiscale::cli
