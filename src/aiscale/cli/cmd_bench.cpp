// aiscale bench: benchmarks that print one JSON line per result.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>

#include "aiscale/bench/allreduce.h"
#include "aiscale/bench/language.h"
#include "aiscale/cli/commands.h"
#include "aiscale/cli/options.h"
#include "aiscale/core/error.h"
#include "aiscale/core/fs.h"
#include "aiscale/parallel/comm.h"

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
  int64_t n_layer = 0, n_head = 0, n_embd = 0, vocab = 0, block = 0;
  std::string output;
  std::string communicator = "auto";
  std::string rendezvous = "auto";
  std::string run_dir;
};

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
  lang->add_option("--model", args->o.model_name,
                   "model preset: gpt2-124m, gpt2-350m, gpt2-774m, gpt2-1558m, gpt-mini, gpt-tiny")
      ->capture_default_str();
  lang->add_option("--layers", args->n_layer, "override the preset's layer count L")->check(integer_in(1, 1024));
  lang->add_option("--heads", args->n_head, "override the preset's head count")->check(integer_in(1, 1024));
  lang->add_option("--width", args->n_embd, "override the preset's width C")->check(integer_in(1, 65536));
  lang->add_option("--vocab", args->vocab, "override the preset's vocabulary size V")->check(integer_in(2, int64_t{1} << 24));
  lang->add_option("--context", args->block, "override the preset's maximum context")->check(integer_in(1, int64_t{1} << 20));
  lang->add_option("--batch,-b", args->o.batch, "micro-batch per rank")->capture_default_str()->check(positive_number());
  lang->add_option("--seq,-t", args->o.seq, "sequence length T")->capture_default_str()->check(positive_number());
  lang->add_option("--grad-accum", args->o.grad_accum, "micro-steps per step")->capture_default_str()->check(positive_number());
  lang->add_option("--steps", args->o.steps, "timed steps")->capture_default_str()->check(positive_number());
  lang->add_option("--warmup", args->o.warmup, "untimed steps first")->capture_default_str()->check(number_in(0));
  lang->add_option("--device", args->o.device, "cpu or cuda")->capture_default_str()->check(CLI::IsMember({"cpu", "cuda"}));
  lang->add_option("--precision", args->o.precision, "fp32, bf16 or fp16 (GPU)")->capture_default_str()->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  lang->add_option("--threads", args->o.threads, "CPU threads (0 = all cores)")->capture_default_str()->check(thread_count());
  lang->add_flag("--recompute", args->o.recompute, "recompute LayerNorm/GELU in backward");
  lang->add_option("--attention", args->o.attention,
                   "GPU attention kernels: auto (cuDNN's fused engines where built in, else the "
                   "own flash kernels), cudnn, flash, simple")
      ->capture_default_str()->check(CLI::IsMember({"auto", "cudnn", "flash", "simple"}));
  lang->add_option("--output,-o", args->output, "also append the JSON line to this file");
  lang->add_option("--run-dir", args->run_dir,
                   "write a run directory: DIR/bench.jsonl (the record) and DIR/steps.jsonl (every "
                   "rank's per-step records; docs/guide/scaling.md); DIR must not hold a result yet");
  lang->add_option("--communicator", args->communicator,
                   "several ranks: auto (NCCL on GPUs, MPI on CPUs), nccl, mpi, none")
      ->capture_default_str()->check(CLI::IsMember({"auto", "nccl", "mpi", "none"}));
  lang->add_option("--rendezvous", args->rendezvous, "nccl: auto, mpi, file:/shared/path or tcp://host:port")->capture_default_str();
  lang->add_option("--zero-stage", args->o.zero_stage,
                   "several GPU ranks: 0 = plain data parallelism, 1 = ZeRO-1 (sharded optimizer state)")
      ->capture_default_str()->check(integer_in(0, 1));
  lang->add_option("--overlap", args->o.overlap,
                   "several GPU ranks: reduce gradient buckets during backward (1) or after it (0)")
      ->capture_default_str();
  lang->add_option("--bucket-mib", args->o.bucket_mib, "several GPU ranks: gradient bucket size")
      ->capture_default_str()->check(number_in(0.001, 1048576));
  lang->add_option("--grad-comm", args->o.grad_comm,
                   "several GPU ranks: type the gradients are summed in (bf16 halves the bytes)")
      ->capture_default_str()->check(CLI::IsMember({"fp32", "bf16"}));
  lang->add_option("--grad-transport", args->o.grad_transport,
                   "several GPU ranks on one node: nccl, or copy-engine (CUDA IPC copies by the "
                   "copy engines, no SMs held; also with --zero-stage 1)")
      ->capture_default_str()->check(CLI::IsMember({"nccl", "copy-engine"}));
  lang->add_option("--baseline-tokens-per-s", args->o.baseline_tokens_per_s,
                   "tokens/s of a 1-device run of the same workload: adds scaling_efficiency = "
                   "tokens/s per device / this")
      ->check(number_in(0));
  lang->callback([args] {
    bench::LanguageBenchOptions o = args->o;
    o.model = nn::gpt_preset(o.model_name);
    if (args->n_layer) o.model.n_layer = args->n_layer;
    if (args->n_head) o.model.n_head = args->n_head;
    if (args->n_embd) o.model.n_embd = args->n_embd;
    if (args->vocab) o.model.vocab_size = args->vocab;
    if (args->block) o.model.block_size = args->block;
    // Before the model: a GPU rank's communicator also selects the rank's GPU.
    parallel::CommOptions co;
    co.kind = args->communicator;
    co.device = o.device;
    co.rendezvous = args->rendezvous;
    auto comm = parallel::make_communicator(co);
    if (!args->run_dir.empty()) {
      o.steps_dir = args->run_dir;
      if (comm->rank() == 0) prepare_bench_run_dir(args->run_dir);
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
