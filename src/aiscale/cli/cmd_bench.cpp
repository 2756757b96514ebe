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
  auto args = std::make_shared<AllreduceArgs>();
  auto* ar = bench->add_subcommand(
      "allreduce",
      "All-reduce bandwidth over message sizes, like nccl-tests: in-place fp32 sum, one JSON line "
      "per size with time, algbw and busbw = algbw*2(n-1)/n (run one rank per GPU through "
      "aiscale launch, mpirun or srun)");
  ar->add_option("--backend", args->o.backend,
                 "nccl (GPU buffers), mpi (host buffers) or tcp (host buffers, the TCP "
                 "communicator of ranks started without MPI, e.g. by torchrun)")
      ->capture_default_str()->check(CLI::IsMember({"nccl", "mpi", "tcp"}));
  ar->add_option("--algorithm", args->o.algorithm,
                 "library (MPI's or NCCL's own all-reduce), ring (hand-written chunked ring: "
                 "MPI point-to-point on CPUs; NCCL send/receive and an add kernel per 4 MiB "
                 "chunk on GPUs) or hierarchical (sum inside each node onto its lowest rank, "
                 "all-reduce among those, broadcast inside the node)")
      ->capture_default_str()->check(CLI::IsMember({"library", "ring", "hierarchical"}));
  ar->add_option("--ranks-per-node", args->o.ranks_per_node,
                 "hierarchical: ranks per node (rank / N is its node, to simulate nodes on one "
                 "host); 0: the nodes the ranks run on")
      ->capture_default_str()->check(integer_in(0, 1 << 20));
  ar->add_option("--min-bytes", args->o.min_bytes, "smallest message")->capture_default_str()
      ->check(integer_in(1, int64_t{1} << 40));
  ar->add_option("--max-bytes", args->o.max_bytes, "largest message")->capture_default_str()
      ->check(integer_in(1, int64_t{1} << 40));
  ar->add_option("--step-factor", args->o.step_factor, "size multiplier between messages (2 or 4 ...)")
      ->capture_default_str()->check(integer_in(2, 1024));
  ar->add_option("--iters", args->o.iters, "timed all-reduces per size")->capture_default_str()
      ->check(integer_in(1, 1'000'000));
  ar->add_option("--warmup", args->o.warmup, "untimed all-reduces per size first")->capture_default_str()
      ->check(integer_in(0, 1'000'000));
  ar->add_option("--repeats", args->o.repeats, "timed loops of --iters per size (the median counts)")
      ->capture_default_str()->check(integer_in(1, 10'000));
  ar->add_option("--system", args->o.system, "machine name for the records (default: $SLURM_CLUSTER_NAME)");
  ar->add_option("--nodes", args->o.nodes,
                 "nodes for the records (default, or 0: $SLURM_JOB_NUM_NODES)")
      ->check(integer_in(0, 1'000'000));
  ar->add_flag("!--no-check", args->o.check, "skip checking one all-reduce per size against the exact sum");
  ar->add_option("--rendezvous", args->rendezvous, "nccl, tcp: auto, mpi (nccl), file:/shared/path or tcp://host:port")->capture_default_str();
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
  auto args = std::make_shared<MachineArgs>();
  auto* m = bench->add_subcommand(
      "machine",
      "What this node can do, measured: dense GEMM TFLOP/s per precision (cuBLASLt fp32, tf32, "
      "bf16, fp16 on GPUs; OpenBLAS fp64, fp32 on CPUs) over a size sweep and at a GPT model's own "
      "GEMM shapes, memory bandwidth (host STREAM-like copy/triad, device kernels), host<->device "
      "(pinned, pageable) and peer-to-peer bandwidth, and all-reduce bus bandwidth over the ranks "
      "it is launched on; one JSON line per figure, and with --output a machine profile (TOML) "
      "that `aiscale plan --machine-profile` uses in place of datasheet figures");
  m->add_option("--device", args->o.device, "auto (cuda where a GPU is visible), cpu or cuda")
      ->capture_default_str()->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  m->add_option("--model", args->o.model, "GPT preset whose GEMM shapes are measured")->capture_default_str();
  m->add_option("--batch", args->o.batch, "sequences per micro-batch for the model's GEMMs (default 1 on CPUs, 16 on GPUs)")
      ->check(integer_in(1, 1 << 20));
  m->add_option("--seq", args->o.seq, "tokens per sequence for the model's GEMMs (default 128 on CPUs, 1024 on GPUs)")
      ->check(integer_in(1, 1 << 20));
  m->add_option("--max-size", args->o.max_size, "largest square GEMM of the sweep (default 2048 on CPUs, 8192 on GPUs)")
      ->check(integer_in(16, 1 << 16));
  m->add_option("--stream-mib", args->o.stream_mib, "MiB per array of the memory and copy tests (default 32 on CPUs, 256 on GPUs)")
      ->check(integer_in(1, 1 << 16));
  m->add_option("--allreduce-bytes", args->o.allreduce_bytes, "all-reduce message size (default 16 MiB on CPUs, 256 MiB on GPUs)")
      ->check(integer_in(4, int64_t{1} << 40));
  m->add_option("--repeats", args->o.repeats, "timed repeats per figure, the median counts (default 3 on CPUs, 5 on GPUs)")
      ->check(integer_in(1, 1000));
  m->add_option("--threads", args->o.threads, "CPU threads (0: OMP_NUM_THREADS, else all cores)")
      ->check(integer_in(0, 1 << 16));
  m->add_flag("--quick", args->o.quick, "small sizes and 2 repeats: a first look in a few seconds");
  m->add_option("--output,-o", args->output,
                "write the machine profile here (TOML, written aside and renamed; "
                "docs/guide/machine-profile.md); checked writable, and every size checked "
                "against the memory, before anything is measured");
  m->add_option("--jsonl", args->jsonl, "also append the JSON lines to this file");
  m->add_option("--rendezvous", args->rendezvous, "GPU ranks: auto, mpi, file:/shared/path or tcp://host:port")
      ->capture_default_str();
  m->footer("Run it as one process for the node's figures, or one rank per GPU (aiscale launch, "
            "mpirun, srun) to add the all-reduce: rank 0 measures the node while the others wait, "
            "then every rank joins the all-reduce. Progress goes to stderr.");
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
  auto args = std::make_shared<LoaderArgs>();
  auto* loader = bench->add_subcommand(
      "loader",
      "Images/s the host's cores decode and augment through the image loader (TurboJPEG/libpng, "
      "random-resized-crop + flip, normalisation), one JSON line per worker-thread count, from a "
      "store packed by `aiscale data pack-images` (--data) or a synthetic JPEG set packed into a "
      "temporary folder (--synthetic)");
  loader->add_option("--data", args->o.data, "an image store (the --output of data pack-images)");
  loader->add_option("--synthetic", args->o.synthetic,
                     "without --data: this many synthetic photo-like JPEGs")
      ->capture_default_str()->check(integer_in(1, 10'000'000));
  loader->add_option("--size", args->size, "synthetic images' size, WxH or S (square)")->capture_default_str();
  loader->add_option("--classes", args->o.classes, "synthetic: classes")->capture_default_str()
      ->check(integer_in(1, 1'000'000));
  loader->add_option("--workdir", args->o.workdir, "synthetic: folder for the temporary store (default: $TMPDIR)");
  loader->add_option("--crop", args->o.crop, "served height and width")->capture_default_str()
      ->check(integer_in(1, 65535));
  loader->add_option("--batch", args->o.batch_size, "images per batch")->capture_default_str()
      ->check(integer_in(1, 1'000'000));
  loader->add_option("--threads", args->o.threads,
                     "worker-thread counts to sweep, e.g. 1,4,16 (default: 1, 2, 4, ... and all usable cores)")
      ->delimiter(',')->check(integer_in(1, 4096));
  loader->add_option("--batches", args->o.batches, "timed batches per thread count")->capture_default_str()
      ->check(integer_in(1, 1'000'000));
  loader->add_option("--warmup", args->o.warmup, "untimed batches first")->capture_default_str()
      ->check(integer_in(0, 1'000'000));
  loader->add_flag("!--validation", args->o.train, "centre crop instead of random-resized-crop + flip");
  loader->add_option("--stage", args->o.stage, "none, ram or local:DIR (copy the store first)")->capture_default_str();
  loader->add_option("--layout", args->o.layout, "nchw or nhwc")->capture_default_str()
      ->check(CLI::IsMember({"nchw", "nhwc"}));
  loader->add_option("--roi-decode", args->roi_decode,
                     "on: decode only the crop's rows and columns of each JPEG (libjpeg's "
                     "jpeg_skip_scanlines/jpeg_crop_scanline); off: the whole image, then crop")
      ->capture_default_str()->check(CLI::IsMember({"on", "off"}));
  loader->add_flag("--skip-corrupt", args->o.skip_corrupt,
                   "skip records that cannot be decoded (counted in skipped_corrupt) instead of "
                   "stopping with an error naming the first");
  loader->add_option("--gpu-images-per-s", args->o.gpu_images_per_s,
                     "images/s one GPU trains at (e.g. from bench vision): adds ratio_to_gpu")
      ->check(number_in(0));
  loader->add_option("--output,-o", args->output, "also append the JSON lines to this file");
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
  auto* bench = app.add_subcommand("bench", "Benchmarks: each prints one JSON line per result");
  bench->require_subcommand(1);

  auto args = std::make_shared<LanguageArgs>();
  auto* lang = bench->add_subcommand(
      "language",
      "GPT training throughput on synthetic tokens: tokens/s, achieved FLOP/s (6N + 12*L*C*T "
      "per token), MFU on GPUs, median and p90 step time, peak memory");
  add_run_options(lang, args->run, bench_run_keys(),
                  "Run settings (the train config's keys; default: the config's defaults)");
  // Whole numbers checked as such: a real-number check let 1e20 through, which CLI11 then
  // kept as the largest 64-bit integer.
  lang->add_option("--steps", args->o.steps, "timed steps")->capture_default_str()
      ->check(integer_in(1, int64_t{1} << 40));
  lang->add_option("--warmup", args->o.warmup, "untimed steps first")->capture_default_str()
      ->check(integer_in(0, int64_t{1} << 40));
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
