// aiscale bench sample: prefill and decoding throughput of the GPT decoder (bench/sample.h).
#include <cstdio>
#include <fstream>
#include <limits>
#include <memory>

#include "aiscale/bench/sample.h"
#include "aiscale/cli/commands.h"
#include "aiscale/cli/options.h"
#include "aiscale/core/error.h"
#include "aiscale/core/fs.h"
#include "aiscale/nn/models/gpt_config.h"
#include "aiscale/train/sources.h"

namespace aiscale::cli {

void add_bench_sample_command(CLI::App* bench) {
  struct Args {
    bench::SampleBenchOptions o;
    int64_t threads = 0;
    std::string output;
  };
  auto args = std::make_shared<Args>();
  auto* cmd = bench->add_subcommand(
      "sample",
      "Text generation throughput through the key/value-cache decoder, on random weights: "
      "prefill tokens/s, then decoding tokens/s per stream and in total with --streams "
      "sequences decoded together (one JSON line)");
  cmd->add_option("--model,--preset", args->o.model, "GPT preset")
      ->capture_default_str()->check(CLI::IsMember(nn::gpt_preset_names()));
  cmd->add_option("--device", args->o.device, "cpu, or cuda (this process's GPU)")
      ->capture_default_str()->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--streams", args->o.streams, "sequences decoded together")
      ->capture_default_str()->check(integer_in(1, 4096));
  cmd->add_option("--prompt-len", args->o.prompt_len, "prompt tokens prefilled per stream")
      ->capture_default_str()->check(integer_in(1, 1 << 20));
  cmd->add_option("--tokens", args->o.tokens, "tokens decoded per stream (timed)")
      ->capture_default_str()->check(integer_in(1, 1 << 20));
  cmd->add_option("--warmup", args->o.warmup, "untimed decoding steps first (after an untimed prefill)")
      ->capture_default_str()->check(integer_in(0, 1 << 20));
  cmd->add_option("--context", args->o.context,
                  "positions of each stream's key/value cache (default: the model's block_size)")
      ->check(integer_in(1, 1 << 20));
  cmd->add_option("--threads", args->threads, "CPU threads (0: OMP_NUM_THREADS, else all cores)")
      ->check(thread_count());
  cmd->add_option("--seed", args->o.seed, "seed of the random weights and prompts")
      ->capture_default_str()->check(integer_in(0, std::numeric_limits<int64_t>::max()));
  cmd->add_option("--output,-o", args->output, "also append the JSON line to this file");
  cmd->callback([args] {
    if (!args->output.empty()) check_output_file(args->output, "--output");  // before measuring
    train::set_cpu_threads(args->threads);
    const nlohmann::json j = bench::run_sample_bench(args->o);
    std::printf("%s\n", j.dump().c_str());
    std::fflush(stdout);
    if (!args->output.empty()) {
      std::ofstream out(args->output, std::ios::app);
      if (!out)
        fail("cannot append to results file '{}': check the folder exists and is writable", args->output);
      out << j.dump() << "\n";
    }
  });
}

}  // namespace aiscale::cli
