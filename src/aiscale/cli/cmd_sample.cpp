// aiscale sample: generate text from a checkpoint, through the key/value-cache decoder.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <memory>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "aiscale/cli/commands.h"
#include "aiscale/cli/help_text.h"
#include "aiscale/cli/options.h"
#include "aiscale/core/error.h"
#include "aiscale/core/fs.h"
#include "aiscale/core/log.h"
#include "aiscale/data/tokenizer.h"
#include "aiscale/nn/models/gpt_decoder.h"
#include "aiscale/train/checkpoint.h"
#include "aiscale/train/checkpoint_check.h"
#include "aiscale/train/config.h"
#include "aiscale/train/generate.h"
#include "aiscale/train/sources.h"

namespace aiscale::cli {
namespace {

namespace fs = std::filesystem;

struct SampleArgs {
  std::string run_dir, checkpoint, prompts_file, tokenizer, eot, device = "cpu";
  std::vector<std::string> prompts, stops;
  train::SampleOptions o;
  int64_t samples = 1;
  int64_t batch = 0;
  int64_t context = 0;
  int64_t threads = 0;
  bool print_ids = false;
  bool jsonl = false;
};

bool same_shape(const nn::GptConfig& a, const nn::GptConfig& b) {
  return a.n_layer == b.n_layer && a.n_head == b.n_head && a.n_embd == b.n_embd &&
         a.block_size == b.block_size && a.vocab_size == b.vocab_size;
}

// The model is the checkpoint's own: its config.json, whose tensors the weights match,
// and the resolved config it was saved with (state.json) must describe the same model,
// or the checkpoint was edited (a head count, say, changes no tensor shape). The run's
// config.toml is only compared: edited after training, it does not change the model.
void check_model_sources(const train::CheckpointState& s, const train::TrainConfig& saved,
                         const std::string& ckpt, const std::string& run_dir) {
  if (!same_shape(s.model, saved.model))
    fail("checkpoint '{}' disagrees with itself: config.json describes {}, but the state it was "
         "saved with (state.json) {}: one of them was edited; restore config.json from the run's "
         "config.toml (or sample another checkpoint)",
         ckpt, train::model_shape_text(s.model), train::model_shape_text(saved.model));
  if (run_dir.empty()) return;
  const std::string path = (fs::path(run_dir) / "config.toml").string();
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return;
  try {
    const train::TrainConfig now = train::parse_train_config(read_file(path), path, {});
    if (!same_shape(now.model, s.model))
      log::warn("'{}' now describes {}, but the checkpoint holds {}: sampling the checkpoint's "
                "model", path, train::model_shape_text(now.model), train::model_shape_text(s.model));
  } catch (const Error& e) {
    log::warn("'{}' cannot be read ({}): sampling the checkpoint's own model", path, e.what());
  }
}

// The prompts: every --prompt, then the lines of --prompts-file (blank lines skipped).
std::vector<std::string> gather_prompts(const SampleArgs& a) {
  std::vector<std::string> prompts = a.prompts;
  if (!a.prompts_file.empty()) {
    const std::string text = read_file(a.prompts_file);
    size_t begin = 0;
    while (begin < text.size()) {
      size_t end = text.find('\n', begin);
      if (end == std::string::npos) end = text.size();
      std::string line = text.substr(begin, end - begin);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (!line.empty()) prompts.push_back(std::move(line));
      begin = end + 1;
    }
    if (prompts.size() == a.prompts.size())
      fail("--prompts-file '{}' holds no prompt: write one per line", a.prompts_file);
  }
  if (prompts.empty()) prompts.push_back("\n");
  return prompts;
}

void print_ids(const std::vector<int32_t>& ids) {
  std::printf("ids: [");
  for (size_t k = 0; k < ids.size(); ++k) std::printf("%s%d", k ? ", " : "", ids[k]);
  std::printf("]\n");
}

void run_sample(const SampleArgs& a) {
  // Options first: nothing is read before they are known to make sense.
  for (const std::string& stop : a.stops)
    if (train::unescape(stop).empty())
      fail("--stop '{}': an empty stop sequence matches before any token; give the text that "
           "ends a sample (escapes such as \\n work)", stop);
  std::string ckpt = a.checkpoint;
  if (ckpt.empty()) {
    if (a.run_dir.empty()) fail("give --run RUN_DIR or --checkpoint CHECKPOINT_DIR");
    if (!fs::is_directory(a.run_dir))
      fail("--run '{}': {}; give the run directory that `aiscale train` printed (run.dir/run.name)",
           a.run_dir, fs::exists(a.run_dir) ? "not a directory" : "no such run directory");
    auto latest = train::latest_checkpoint((fs::path(a.run_dir) / "checkpoints").string());
    if (!latest) fail("'{}' has no complete checkpoint: train it first (or wait for one)", a.run_dir);
    ckpt = *latest;
  }
  train::CheckpointState s = train::read_checkpoint(ckpt, /*with_optimizer=*/false);
  const train::TrainConfig c = train::parse_train_config(s.config_toml, ckpt + "/state.json", {});
  check_model_sources(s, c, ckpt, a.run_dir);
  train::set_cpu_threads(a.threads);
  auto tok = data::make_tokenizer(a.tokenizer.empty() ? c.tokenizer : a.tokenizer,
                                  data::TokenizerOptions{{}, a.eot});
  if (tok->vocab_size() > s.model.vocab_size)
    fail("tokenizer '{}' has {} tokens but the model only {}: pass the --tokenizer "
         "of the data it was trained on", tok->name(), tok->vocab_size(), s.model.vocab_size);
  if (a.context > s.model.block_size)
    fail("--context {} is longer than the model's {} positions (model.block_size): give at most {}",
         a.context, s.model.block_size, s.model.block_size);

  const std::vector<std::string> prompts = gather_prompts(a);
  std::vector<std::vector<int32_t>> ids;  // each prompt --samples times, in order
  std::vector<const std::string*> texts;
  for (const std::string& p : prompts)
    for (int64_t k = 0; k < a.samples; ++k) {
      ids.push_back(tok->encode(p));
      texts.push_back(&p);
    }
  const int64_t streams = static_cast<int64_t>(ids.size());

  nn::GptDecoderOptions d;
  d.streams = std::min<int64_t>(streams, a.batch > 0 ? a.batch : 16);
  // The window the model was trained on: its positions beyond were never trained.
  d.context = a.context > 0 ? a.context : std::min(s.model.block_size, c.seq_len);
  auto decoder = nn::make_gpt_decoder(a.device, s.model, d);
  decoder->set_params(s.params.data());
  std::vector<float>().swap(s.params);  // the decoder holds its copy

  train::SampleOptions o = a.o;
  o.end_of_text = tok->eot();
  for (const std::string& stop : a.stops) o.stop.push_back(train::unescape(stop));
  std::fprintf(stderr, "checkpoint %s (step %lld), %lld stream%s of %lld positions on %s\n",
               ckpt.c_str(), static_cast<long long>(s.step), static_cast<long long>(streams),
               streams == 1 ? "" : "s", static_cast<long long>(decoder->context()),
               decoder->device_name().c_str());

  // One stream prints its text as it is produced; several print each stream when it ends,
  // or a JSON object per stream with --jsonl.
  const bool live = streams == 1 && !a.jsonl;
  if (live) {
    std::printf("%s", texts[0]->c_str());
    std::fflush(stdout);
  }
  train::GenerateCallbacks cb;
  if (live)
    cb.on_text = [](int64_t, std::string_view text) {
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::fflush(stdout);
    };
  cb.on_done = [&](const train::SampleResult& r) {
    const std::string& prompt = *texts[size_t(r.index)];
    if (a.jsonl) {
      nlohmann::ordered_json j = {{"index", r.index},
                                  {"prompt", prompt},
                                  {"text", r.text},
                                  {"tokens", r.ids.size()},
                                  {"stop_reason", train::stop_reason_name(r.reason)}};
      if (r.reason == train::StopReason::stop_sequence) j["stop_sequence"] = r.stop_sequence;
      j["ids"] = r.ids;
      // Text cut mid-character (a token limit inside a UTF-8 sequence) is not valid UTF-8.
      std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    } else if (live) {
      std::printf("\n");
      if (a.print_ids) print_ids(r.ids);
    } else {
      std::printf("--- %lld/%lld (prompt %lld): %zu token%s, %s ---\n%s%s\n",
                  static_cast<long long>(r.index + 1), static_cast<long long>(streams),
                  static_cast<long long>(r.index / a.samples + 1), r.ids.size(),
                  r.ids.size() == 1 ? "" : "s", train::stop_reason_name(r.reason), prompt.c_str(),
                  r.text.c_str());
      if (a.print_ids) print_ids(r.ids);
    }
    std::fflush(stdout);
  };
  train::GenerateStats stats;
  train::generate(*decoder, *tok, ids, o, cb, &stats);
  std::fprintf(stderr, "sample: %lld tokens in %.2f s (%.1f tokens/s), %lld prompt tokens\n",
               static_cast<long long>(stats.generated_tokens), stats.seconds,
               stats.seconds > 0 ? static_cast<double>(stats.generated_tokens) / stats.seconds : 0.0,
               static_cast<long long>(stats.prompt_tokens));
}

}  // namespace

void add_sample_command(CLI::App& app) {
  const HelpSection help("sample", "sample");
  auto a = std::make_shared<SampleArgs>();
  auto* cmd = app.add_subcommand("sample", help.about());
  help.option(cmd, "--run,-r", a->run_dir);
  help.option(cmd, "--checkpoint", a->checkpoint);
  help.option(cmd, "--device", a->device)
      ->capture_default_str()->check(CLI::IsMember({"cpu", "cuda"}));
  help.option(cmd, "--prompt,-p", a->prompts)->expected(1)->take_all();
  help.option(cmd, "--prompts-file", a->prompts_file);
  help.option(cmd, "--tokens,-n", a->o.max_new_tokens)->capture_default_str()->check(integer_in(1));
  help.option(cmd, "--min-tokens", a->o.min_new_tokens)
      ->capture_default_str()->check(integer_in(0));
  help.option(cmd, "--temperature", a->o.sampling.temperature)
      ->capture_default_str()->check(number_in(0));
  help.option(cmd, "--top-k", a->o.sampling.top_k)->capture_default_str()->check(integer_in(0));
  help.option(cmd, "--top-p", a->o.sampling.top_p)
      ->capture_default_str()->check(positive_number())->check(number_in(0, 1));
  help.option(cmd, "--stop", a->stops)->expected(1)->take_all();
  help.option(cmd, "--samples", a->samples)->capture_default_str()->check(integer_in(1, 1 << 20));
  help.option(cmd, "--batch", a->batch)->check(integer_in(1, 1 << 20));
  help.option(cmd, "--context", a->context)->check(integer_in(1, 1 << 30));
  help.option(cmd, "--seed", a->o.seed)
      ->capture_default_str()->check(integer_in(0, std::numeric_limits<int64_t>::max()));
  help.option(cmd, "--tokenizer", a->tokenizer);
  help.option(cmd, "--eot", a->eot);
  help.option(cmd, "--threads", a->threads)->check(thread_count());
  help.flag(cmd, "--jsonl", a->jsonl);
  help.flag(cmd, "--print-ids", a->print_ids);
  cmd->footer(help.footer());
  cmd->callback([a] { run_sample(*a); });
}

}  // namespace aiscale::cli
