// aiscale sample: generate text from a checkpoint.
#include <cstdio>
#include <filesystem>
#include <memory>

#include <fmt/format.h>

#include "aiscale/cli/commands.h"
#include "aiscale/cli/options.h"
#include "aiscale/core/error.h"
#include "aiscale/data/tokenizer.h"
#include "aiscale/nn/models/gpt.h"
#include "aiscale/train/checkpoint.h"
#include "aiscale/train/config.h"
#include "aiscale/train/generate.h"
#include "aiscale/train/sources.h"

namespace aiscale::cli {
namespace {

struct SampleArgs {
  std::string run_dir, checkpoint, prompt = "\n", tokenizer;
  train::SampleOptions o;
  uint64_t seed = 42;
  int64_t samples = 1;
  int64_t threads = 0;
  bool print_ids = false;
};

void run_sample(const SampleArgs& a) {
  namespace fs = std::filesystem;
  std::string ckpt = a.checkpoint;
  if (ckpt.empty()) {
    if (a.run_dir.empty()) fail("give --run RUN_DIR or --checkpoint CHECKPOINT_DIR");
    auto latest = train::latest_checkpoint((fs::path(a.run_dir) / "checkpoints").string());
    if (!latest) fail("'{}' has no complete checkpoint: train it first (or wait for one)", a.run_dir);
    ckpt = *latest;
  }
  train::CheckpointState s = train::read_checkpoint(ckpt, /*with_optimizer=*/false);
  train::TrainConfig c = train::parse_train_config(s.config_toml, ckpt + "/state.json", {});
  train::set_cpu_threads(a.threads);
  auto tok = data::make_tokenizer(a.tokenizer.empty() ? c.tokenizer : a.tokenizer);
  if (tok->vocab_size() > s.model.vocab_size)
    fail("tokenizer '{}' has {} tokens but the model only {}: pass --tokenizer byte or gpt2 to match "
         "the data it was trained on", tok->name(), tok->vocab_size(), s.model.vocab_size);
  nn::GptRunOptions ro;
  ro.batch = 1;
  ro.seq = std::min(s.model.block_size, c.seq_len);
  auto model = nn::make_gpt_cpu(s.model, ro);
  model->set_params(s.params.data());
  Rng rng(a.seed);
  train::SampleOptions o = a.o;
  o.stop_token = tok->eot();
  std::fprintf(stderr, "checkpoint %s (step %lld)\n", ckpt.c_str(), static_cast<long long>(s.step));
  for (int64_t i = 0; i < a.samples; ++i) {
    std::vector<int32_t> ids;
    tok->encode_append(a.prompt, ids);
    std::printf("%s", a.prompt.c_str());
    std::fflush(stdout);
    // Decode incrementally: print the text of all generated ids so far minus what was printed
    // (a multi-byte character may span several tokens).
    std::vector<int32_t> generated;
    size_t printed = 0;
    std::vector<int32_t> all_ids = train::generate(*model, ids, o, rng, [&](int32_t id) {
      if (id == tok->eot()) {  // a document ends; with --min-tokens the next one follows
        std::printf("\n");
        generated.clear();
        printed = 0;
        return;
      }
      generated.push_back(id);
      std::string text = tok->decode(generated);
      if (text.size() > printed) {
        std::fwrite(text.data() + printed, 1, text.size() - printed, stdout);
        std::fflush(stdout);
        printed = text.size();
      }
    });
    std::printf("\n%s", i + 1 < a.samples ? "---\n" : "");
    if (a.print_ids) {
      std::printf("ids: [");
      for (size_t k = 0; k < all_ids.size(); ++k) std::printf("%s%d", k ? ", " : "", all_ids[k]);
      std::printf("]\n");
    }
  }
}

}  // namespace

void add_sample_command(CLI::App& app) {
  auto a = std::make_shared<SampleArgs>();
  auto* cmd = app.add_subcommand("sample", "Generate text from a trained model's checkpoint");
  cmd->add_option("--run,-r", a->run_dir, "run directory: its newest complete checkpoint is used");
  cmd->add_option("--checkpoint", a->checkpoint, "a checkpoint folder (runs/X/checkpoints/step_N)");
  cmd->add_option("--prompt,-p", a->prompt, "text to continue")->capture_default_str();
  cmd->add_option("--tokens,-n", a->o.max_new_tokens, "tokens to generate")->capture_default_str()->check(integer_in(1));
  cmd->add_option("--min-tokens", a->o.min_new_tokens,
                  "generate at least this many tokens: an end-of-text token before then starts a new "
                  "line instead of ending the sample (default 0: stop at the first end-of-text)")
      ->capture_default_str()->check(integer_in(0));
  cmd->add_option("--temperature", a->o.temperature, "sampling temperature; 0 = greedy")->capture_default_str()->check(number_in(0));
  cmd->add_option("--top-k", a->o.top_k, "sample among the k most likely tokens; 0 = all")->capture_default_str()->check(integer_in(0));
  cmd->add_option("--samples", a->samples, "how many continuations")->capture_default_str()->check(integer_in(1));
  cmd->add_option("--seed", a->seed, "random seed")->capture_default_str();
  cmd->add_option("--tokenizer", a->tokenizer, "gpt2 or byte (default: the run's data.tokenizer)")->check(CLI::IsMember({"gpt2", "byte"}));
  cmd->add_option("--threads", a->threads, "CPU threads (0 = all cores)");
  cmd->add_flag("--print-ids", a->print_ids, "also print every generated token id, end-of-text included (\"ids: [...]\")");
  cmd->callback([a] { run_sample(*a); });
}

}  // namespace aiscale::cli
