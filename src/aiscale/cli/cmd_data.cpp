// `aiscale data`: tokenize text into llm.c-format token shards, inspect a shard, and pack
// images into an LMDB image store (pack-images).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "aiscale/cli/commands.h"
#include "aiscale/cli/help_text.h"
#include "aiscale/cli/options.h"
#include "aiscale/core/error.h"
#include "aiscale/data/images/idx.h"
#include "aiscale/data/images/pack_images.h"
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
  std::string eot;
  std::string format = "auto";
  std::string separator;
  std::string jsonl_field = "text";
  bool skip_bad_lines = false;
  bool fortune = false;
  double val_fraction = 0.05;
  int64_t shard_tokens = 100'000'000;
  int threads = 0;
};

struct InspectArgs {
  std::string shard;
  std::string tokenizer = "gpt2";
  std::string vocab_dir;
  std::string eot;
  int64_t tokens = 64;
};

std::string human_count(double n) {
  if (n >= 1e9) return fmt::format("{:.2f}G", n / 1e9);
  if (n >= 1e6) return fmt::format("{:.2f}M", n / 1e6);
  if (n >= 1e3) return fmt::format("{:.1f}k", n / 1e3);
  return fmt::format("{:.0f}", n);
}

// Progress on stderr: rewritten in place on a terminal (padded to `width` columns), a line
// every few seconds in a log, and the last line once.
class ProgressLine {
 public:
  // Without `first_at_once`, the first line comes after one interval: a short run prints
  // only its end.
  ProgressLine(int width, bool first_at_once)
      : tty_(::isatty(::fileno(stderr)) != 0), width_(width), last_(first_at_once ? -1e9 : 0) {}

  // Prints the line that `line()` makes if one is due `seconds` into the work.
  template <typename MakeLine>
  void operator()(double seconds, bool done, MakeLine&& line) {
    if (done_printed_ || (!done && seconds - last_ < interval())) return;
    done_printed_ = done;
    last_ = seconds;
    if (tty_)
      fmt::print(stderr, "\r{:<{}}{}", line(), width_, done ? "\n" : "");
    else
      fmt::print(stderr, "{}\n", line());
    std::fflush(stderr);
  }

 private:
  double interval() const { return tty_ ? 0.5 : 10.0; }

  bool tty_;
  int width_;
  double last_;
  bool done_printed_ = false;
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
  options.jsonl_field = args.jsonl_field;
  options.skip_bad_lines = args.skip_bad_lines;
  const auto tokenizer = data::make_tokenizer(args.tokenizer, {args.vocab_dir, args.eot});

  ProgressLine progress(100, false);
  const data::TokenizeSummary s =
      data::tokenize_corpus(options, *tokenizer, [&](const data::TokenizeProgress& p) {
        progress(p.seconds, p.finished, [&] {
          const double percent = p.bytes_total > 0 ? 100.0 * p.bytes / p.bytes_total : 100.0;
          return fmt::format(
              "tokenize: {:5.1f}% {}B of {}B, {} documents, {} tokens, {} tokens/s, {}B/s of text",
              percent, human_count(p.bytes), human_count(p.bytes_total), p.documents,
              human_count(p.tokens), human_count(p.seconds > 0 ? p.tokens / p.seconds : 0),
              human_count(p.seconds > 0 ? p.text_bytes / p.seconds : 0));
        });
      });

  const int64_t tokens = s.train_tokens + s.val_tokens;
  fmt::print("tokenized {} file(s), {} bytes ({} bytes of text), in {:.2f} s with tokenizer {} "
             "(vocabulary {}, end-of-text {}, format {}, {}-bit shards)\n",
             s.files, s.bytes, s.text_bytes, s.seconds, tokenizer->name(), tokenizer->vocab_size(),
             tokenizer->eot(), data::to_string(options.format),
             8 * data::shard_token_bytes(tokenizer->vocab_size()));
  fmt::print("documents: {} ({} train, {} val); tokens: {} ({:.0f} tokens/s, {:.2f} MB/s of text, "
             "{:.2f} bytes/token)\n",
             s.documents, s.documents - s.val_documents, s.val_documents, tokens,
             s.seconds > 0 ? tokens / s.seconds : 0.0, s.seconds > 0 ? s.text_bytes / s.seconds / 1e6 : 0.0,
             tokens > s.documents ? double(s.text_bytes) / double(tokens - s.documents) : 0.0);
  if (s.bad_lines > 0)
    fmt::print("left out {} malformed JSONL line(s) (--skip-bad-lines)\n", s.bad_lines);
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
  const data::ShardHeader header = data::read_shard_header(args.shard);
  fmt::print("shard:   {}\n", args.shard);
  fmt::print("header:  magic {}, version {}, {} tokens of {} bits ({} bytes), vocabulary {}\n",
             header.magic, header.version, header.token_count, 8 * header.token_bytes,
             header.file_bytes,
             header.vocab_size > 0 ? std::to_string(header.vocab_size) : std::string("not recorded"));
  std::unique_ptr<data::Tokenizer> tokenizer;
  if (args.tokenizer != "none") tokenizer = data::make_tokenizer(args.tokenizer, {args.vocab_dir, args.eot});
  if (shard.size() > 0) {
    // Ids read as unsigned: a uint32 shard may hold ids above INT32_MAX.
    uint32_t min_id = UINT32_MAX, max_id = 0;
    int64_t eots = 0;
    const uint32_t eot = tokenizer ? static_cast<uint32_t>(tokenizer->eot()) : UINT32_MAX;
    for (int64_t i = 0; i < shard.size(); ++i) {
      const uint32_t id = static_cast<uint32_t>(shard.token(i));
      min_id = std::min(min_id, id), max_id = std::max(max_id, id);
      eots += id == eot;
    }
    fmt::print("ids:     min {}, max {}\n", min_id, max_id);
    if (tokenizer) {
      fmt::print("documents: {} (end-of-text id {} of tokenizer {})\n", eots, tokenizer->eot(),
                 tokenizer->name());
      if (max_id >= static_cast<uint32_t>(tokenizer->vocab_size()))
        fmt::print("warning: ids reach {}, beyond tokenizer {}'s vocabulary of {}; decode with "
                   "another --tokenizer\n", max_id, tokenizer->name(), tokenizer->vocab_size());
    }
  }
  const int64_t n = std::min<int64_t>(shard.size(), std::max<int64_t>(args.tokens, 0));
  std::vector<int32_t> first(static_cast<size_t>(n));
  shard.copy(0, n, first.data());
  fmt::print("first {} tokens: {}\n", n, fmt::join(first, " "));
  if (tokenizer && n > 0) {
    const bool fits = std::all_of(first.begin(), first.end(), [&](int32_t id) {
      return id >= 0 && id < tokenizer->vocab_size();
    });
    if (fits) fmt::print("decoded:\n{}\n", tokenizer->decode(first));
  }
}

struct PackImagesArgs {
  data::PackImagesOptions o;
  std::string fashion_mnist;  // a folder with Fashion-MNIST's four IDX files
  bool fashion_mnist_given = false;
};

void print_pack_summary(const data::PackImagesSummary& s, const std::string& output) {
  const data::ImageStoreMeta& m = s.meta;
  const std::string size = m.height > 0 ? fmt::format("{}x{}", m.height, m.width) : "mixed sizes";
  fmt::print("packed {} images ({} classes, {} channel(s), {}) into {} in {:.1f} s: {} of images\n",
             m.records, m.classes, m.channels, size, output, s.seconds, human_count(double(s.bytes)) + "B");
  fmt::print("mean [{:.4f}], std [{:.4f}]\n", fmt::join(m.mean, ", "), fmt::join(m.std, ", "));
  if (s.skipped_bad > 0) fmt::print("skipped {} unreadable file(s) (--skip-bad-images)\n", s.skipped_bad);
  if (s.skipped_other > 0) fmt::print("left out {} file(s) that are not .jpg, .jpeg or .png\n", s.skipped_other);
}

void run_pack_one(const data::PackImagesOptions& o) {
  ProgressLine progress(80, true);
  const data::PackImagesSummary s = data::pack_images(o, [&](const data::PackImagesProgress& p) {
    progress(p.seconds, p.done >= p.total, [&] {
      return fmt::format("pack-images: {:5.1f}% {} of {} images, {} images/s",
                         100.0 * p.done / p.total, p.done, p.total,
                         human_count(p.seconds > 0 ? p.done / p.seconds : 0));
    });
  });
  print_pack_summary(s, o.output);
}

void run_pack_images(const PackImagesArgs& args) {
  if (!args.fashion_mnist_given) {
    run_pack_one(args.o);
    return;
  }
  // Fashion-MNIST: both splits, OUTPUT/train and OUTPUT/test, with the class names.
  namespace fs = std::filesystem;
  const fs::path dir = args.fashion_mnist.empty() ? fs::path(data::kFashionMnistDir) : fs::path(args.fashion_mnist);
  for (const auto& [split, prefix] : {std::pair{"train", "train"}, std::pair{"test", "t10k"}}) {
    data::PackImagesOptions o = args.o;
    o.idx_images = (dir / fmt::format("{}-images-idx3-ubyte.gz", prefix)).string();
    o.idx_labels = (dir / fmt::format("{}-labels-idx1-ubyte.gz", prefix)).string();
    o.output = (fs::path(args.o.output) / split).string();
    if (o.class_names.empty()) o.class_names = data::fashion_mnist_class_names();
    run_pack_one(o);
  }
}

void add_pack_images_command(CLI::App* data) {
  const HelpSection help("data", "pack-images");
  auto args = std::make_shared<PackImagesArgs>();
  CLI::App* pack = data->add_subcommand("pack-images", help.about());
  help.option(pack, "--folder", args->o.folder);
  help.option(pack, "--idx-images", args->o.idx_images);
  help.option(pack, "--idx-labels", args->o.idx_labels);
  auto* fm = help.option(pack, "--fashion-mnist", args->fashion_mnist)->expected(0, 1);
  help.option(pack, "--output,-o", args->o.output)->required();
  help.option(pack, "--encode", args->o.encode)
      ->capture_default_str()->check(CLI::IsMember({"png", "jpeg", "raw"}));
  help.option(pack, "--jpeg-quality", args->o.jpeg_quality)
      ->capture_default_str()->check(integer_in(1, 100));
  help.option(pack, "--class-names", args->o.class_names)->delimiter(',');
  help.option(pack, "--max-per-class", args->o.max_per_class)
      ->capture_default_str()->check(integer_in(0));
  help.option(pack, "--limit", args->o.limit)->capture_default_str()->check(integer_in(0));
  help.flag(pack, "--skip-bad-images", args->o.skip_bad_images);
  help.option(pack, "--threads", args->o.threads)->capture_default_str()->check(thread_count());
  pack->callback([args, fm] {
    args->fashion_mnist_given = fm->count() > 0;
    const int inputs = int(!args->o.folder.empty()) + int(!args->o.idx_images.empty() || !args->o.idx_labels.empty()) +
                       int(args->fashion_mnist_given);
    if (inputs != 1)
      fail("pack-images needs exactly one input: --folder DIR, --idx-images F --idx-labels F, or "
           "--fashion-mnist [DIR]");
    run_pack_images(*args);
  });
}

}  // namespace

void add_data_command(CLI::App& app) {
  const HelpSection data_help("data", "data");
  const HelpSection tokenize_help("data", "tokenize");
  const HelpSection inspect_help("data", "inspect");
  CLI::App* data = app.add_subcommand("data", data_help.about());
  data->require_subcommand(1);

  auto targs = std::make_shared<TokenizeArgs>();
  CLI::App* tokenize = data->add_subcommand("tokenize", tokenize_help.about());
  tokenize_help.option(tokenize, "--input,-i", targs->inputs)->required()->expected(1, -1);
  tokenize_help.option(tokenize, "--output-prefix,-o", targs->output_prefix)->required();
  tokenize_help.option(tokenize, "--tokenizer", targs->tokenizer)->capture_default_str();
  tokenize_help.option(tokenize, "--eot", targs->eot);
  tokenize_help.option(tokenize, "--vocab-dir", targs->vocab_dir);
  tokenize_help.option(tokenize, "--format", targs->format)->capture_default_str()
      ->check(CLI::IsMember({"auto", "whole", "paragraphs", "lines", "fortune", "jsonl"}));
  tokenize_help.option(tokenize, "--jsonl-field", targs->jsonl_field)->capture_default_str();
  tokenize_help.flag(tokenize, "--skip-bad-lines", targs->skip_bad_lines);
  tokenize_help.flag(tokenize, "--fortune", targs->fortune);
  tokenize_help.option(tokenize, "--separator", targs->separator);
  tokenize_help.option(tokenize, "--val-fraction", targs->val_fraction)->capture_default_str()
      ->check(number_in(0.0, 0.999999));
  tokenize_help.option(tokenize, "--shard-tokens", targs->shard_tokens)->capture_default_str()
      ->check(integer_in(1, INT32_MAX));
  tokenize_help.option(tokenize, "--threads", targs->threads)->capture_default_str()
      ->check(thread_count());
  tokenize->callback([targs] { run_tokenize(*targs); });

  auto iargs = std::make_shared<InspectArgs>();
  CLI::App* inspect = data->add_subcommand("inspect", inspect_help.about());
  inspect_help.option(inspect, "shard", iargs->shard)->required();
  inspect_help.option(inspect, "--tokens,-n", iargs->tokens)->capture_default_str()
      ->check(integer_in(0, int64_t{1} << 32));
  inspect_help.option(inspect, "--tokenizer", iargs->tokenizer)->capture_default_str();
  inspect_help.option(inspect, "--eot", iargs->eot);
  inspect_help.option(inspect, "--vocab-dir", iargs->vocab_dir);
  inspect->callback([iargs] { run_inspect(*iargs); });

  add_pack_images_command(data);
}

}  // namespace aiscale::cli
