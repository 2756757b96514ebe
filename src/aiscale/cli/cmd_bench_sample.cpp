// aiscale bench sample: prefill and decoding throughput of the GPT decoder (bench/sample.h).
#include <cstdio>
#include <fstream>
#include <limits>
#include <memory>

#include "aiscale/bench/sample.h"
#include "aiscale/cli/commands.h"
#include "aiscale/cli/help_text.h"
#include "aiscale/cli/options.h"
#include "aiscale/core/error.h"
#include "aiscale/core/fs.h"
#include "aiscale/nn/models/gpt_config.h"
#include "aiscale/train/sources.h"

namespace aiscale::cli {

void add_bench_sample_command(CLI::App* bench) {
  const HelpSection help("bench", "sample");
  struct Args {
    bench::SampleBenchOptions o;
    int64_t threads = 0;
    std::string output;
  };
  auto args = std::make_shared<Args>();
  auto* cmd = bench->add_subcommand("sample", help.about());
  help.option(cmd, "--model,--preset", args->o.model)
      ->capture_default_str()->check(CLI::IsMember(nn::gpt_preset_names()));
  help.option(cmd, "--device", args->o.device)
      ->capture_default_str()->check(CLI::IsMember({"cpu", "cuda"}));
  help.option(cmd, "--streams", args->o.streams)->capture_default_str()->check(integer_in(1, 4096));
  help.option(cmd, "--prompt-len", args->o.prompt_len)
      ->capture_default_str()->check(integer_in(1, 1 << 20));
  help.option(cmd, "--tokens", args->o.tokens)
      ->capture_default_str()->check(integer_in(1, 1 << 20));
  help.option(cmd, "--warmup", args->o.warmup)
      ->capture_default_str()->check(integer_in(0, 1 << 20));
  help.option(cmd, "--context", args->o.context)->check(integer_in(1, 1 << 20));
  help.option(cmd, "--threads", args->threads)->check(thread_count());
  help.option(cmd, "--seed", args->o.seed)
      ->capture_default_str()->check(integer_in(0, std::numeric_limits<int64_t>::max()));
  help.option(cmd, "--output,-o", args->output);
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
