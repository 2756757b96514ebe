// Text files -> token shards; see tokenize_corpus.h.
#include "aiscale/data/tokenize_corpus.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <memory>
#include <span>
#include <sstream>

#include "aiscale/core/error.h"
#include "aiscale/data/token_shard.h"

namespace aiscale::data {
namespace {

bool is_blank(std::string_view text) {
  return std::all_of(text.begin(), text.end(), [](char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
  });
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot read input file {}: check that it exists and is readable", path.string());
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// Writes one split (train or val) into numbered shards of at most `shard_tokens`.
class ShardSink {
 public:
  ShardSink(std::string prefix, std::string split, int64_t shard_tokens)
      : prefix_(std::move(prefix)), split_(std::move(split)), shard_tokens_(shard_tokens) {}

  void append(std::span<const int32_t> ids) {
    while (!ids.empty()) {
      if (!writer_) writer_ = std::make_unique<TokenShardWriter>(shard_path(prefix_, split_, written_.size()));
      const size_t room = static_cast<size_t>(shard_tokens_ - writer_->token_count());
      const size_t n = std::min(room, ids.size());
      writer_->append(ids.first(n));
      tokens_ += static_cast<int64_t>(n);
      ids = ids.subspan(n);
      if (writer_->token_count() == shard_tokens_) close();
    }
  }

  // Finishes the last shard; writes an empty shard 0 if nothing came, so the output
  // names are predictable.
  void finish() {
    if (!writer_ && written_.empty())
      writer_ = std::make_unique<TokenShardWriter>(shard_path(prefix_, split_, 0));
    if (writer_) close();
  }

  const std::vector<std::filesystem::path>& shards() const { return written_; }
  const std::vector<ShardRename>& renames() const { return renames_; }
  int64_t tokens() const { return tokens_; }

 private:
  void close() {
    writer_->finish_aside();  // switched in with the whole set
    written_.push_back(writer_->path());
    renames_.push_back({writer_->temp_path(), writer_->path()});
    writer_.reset();
  }

  std::string prefix_, split_;
  int64_t shard_tokens_;
  std::unique_ptr<TokenShardWriter> writer_;
  std::vector<std::filesystem::path> written_;
  std::vector<ShardRename> renames_;
  int64_t tokens_ = 0;
};

// Shards named like ours (stem_split_NNNNNN.bin) with an index >= `keep`.
std::vector<std::filesystem::path> stale_shards(const std::string& prefix, std::string_view split,
                                                int64_t keep) {
  const std::filesystem::path prefix_path(prefix);
  std::filesystem::path dir = prefix_path.parent_path();
  if (dir.empty()) dir = ".";
  const std::string head = prefix_path.filename().string() + "_" + std::string(split) + "_";
  std::vector<std::filesystem::path> stale;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with(head) || !name.ends_with(".bin")) continue;
    const std::string_view digits =
        std::string_view(name).substr(head.size(), name.size() - head.size() - 4);
    if (digits.size() < 6 || !std::all_of(digits.begin(), digits.end(), ::isdigit)) continue;
    if (std::stoll(std::string(digits)) >= keep) stale.push_back(entry.path());
  }
  std::sort(stale.begin(), stale.end());
  return stale;
}

}  // namespace

DocumentFormat parse_document_format(std::string_view name) {
  if (name == "whole") return DocumentFormat::whole;
  if (name == "paragraphs") return DocumentFormat::paragraphs;
  if (name == "lines") return DocumentFormat::lines;
  if (name == "fortune") return DocumentFormat::fortune;
  fail("unknown document format '{}': choose whole, paragraphs, lines or fortune", name);
}

std::string_view to_string(DocumentFormat format) {
  switch (format) {
    case DocumentFormat::whole: return "whole";
    case DocumentFormat::paragraphs: return "paragraphs";
    case DocumentFormat::lines: return "lines";
    case DocumentFormat::fortune: return "fortune";
  }
  return "?";
}

std::filesystem::path shard_path(const std::string& prefix, std::string_view split, int64_t index) {
  return fmt::format("{}_{}_{:06d}.bin", prefix, split, index);
}

void split_documents(std::string_view text, DocumentFormat format,
                     const std::optional<std::string>& separator_line,
                     const std::function<void(std::string_view)>& emit) {
  const auto emit_if_content = [&](std::string_view doc) {
    if (!is_blank(doc)) emit(doc);
  };
  if (format == DocumentFormat::whole && !separator_line) {
    emit_if_content(text);
    return;
  }
  size_t doc_start = 0;
  for (size_t line_start = 0; line_start < text.size();) {
    size_t line_end = text.find('\n', line_start);
    line_end = line_end == std::string_view::npos ? text.size() : line_end + 1;
    const std::string_view line = text.substr(line_start, line_end - line_start);
    std::string_view content = line;
    if (content.ends_with('\n')) content.remove_suffix(1);
    if (content.ends_with('\r')) content.remove_suffix(1);
    bool boundary;
    if (separator_line)
      boundary = content == *separator_line;
    else if (format == DocumentFormat::fortune)
      boundary = content == "%";
    else if (format == DocumentFormat::paragraphs)
      boundary = is_blank(content);
    else  // lines: every line is a document of its own
      boundary = false;
    if (boundary) {
      emit_if_content(text.substr(doc_start, line_start - doc_start));
      doc_start = line_end;
    } else if (format == DocumentFormat::lines && !separator_line) {
      emit_if_content(line);
      doc_start = line_end;
    }
    line_start = line_end;
  }
  emit_if_content(text.substr(doc_start));
}

std::vector<std::filesystem::path> list_input_files(const std::vector<std::filesystem::path>& inputs,
                                                    DocumentFormat format) {
  if (inputs.empty()) fail("no input given: pass text files or directories with --input");
  std::vector<std::filesystem::path> files;
  for (const auto& input : inputs) {
    std::error_code error;
    if (std::filesystem::is_directory(input, error)) {
      std::vector<std::filesystem::path> found;
      for (const auto& entry : std::filesystem::directory_iterator(input)) {
        const std::string name = entry.path().filename().string();
        if (name.starts_with(".") || !entry.is_regular_file()) continue;
        if (format == DocumentFormat::fortune && (name.ends_with(".dat") || name.ends_with(".u8")))
          continue;
        found.push_back(entry.path());
      }
      std::sort(found.begin(), found.end());
      files.insert(files.end(), found.begin(), found.end());
    } else if (std::filesystem::is_regular_file(input, error)) {
      files.push_back(input);
    } else {
      fail("input {} is neither a file nor a directory; check the path", input.string());
    }
  }
  if (files.empty())
    fail("the inputs ({}) contain no files to tokenize", inputs.front().string());
  return files;
}

TokenizeSummary tokenize_corpus(const TokenizeOptions& options, const Tokenizer& tokenizer,
                                const std::function<void(const TokenizeProgress&)>& progress) {
  const auto started = std::chrono::steady_clock::now();
  const auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  };
  if (options.output_prefix.empty() || options.output_prefix.ends_with('/'))
    fail("--output-prefix '{}' must name the shard files, e.g. data/fortunes (giving "
         "data/fortunes_train_000000.bin)", options.output_prefix);
  if (!(options.val_fraction >= 0 && options.val_fraction < 1))
    fail("--val-fraction {} must be in [0, 1)", options.val_fraction);
  if (options.shard_tokens < 1 || options.shard_tokens > INT32_MAX)
    fail("--shard-tokens {} must be in [1, {}] (the shard header counts tokens in an int32)",
         options.shard_tokens, INT32_MAX);
  if (tokenizer.vocab_size() > 65536)
    fail("tokenizer '{}' has {} tokens; shards store uint16 ids (at most 65536)",
         tokenizer.name(), tokenizer.vocab_size());

  TokenizeSummary summary;
  const std::vector<std::filesystem::path> files = list_input_files(options.inputs, options.format);
  summary.files = static_cast<int64_t>(files.size());
  TokenizeProgress state;
  for (const auto& file : files) state.bytes_total += static_cast<int64_t>(std::filesystem::file_size(file));

  const std::filesystem::path out_dir = std::filesystem::path(options.output_prefix).parent_path();
  if (!out_dir.empty()) std::filesystem::create_directories(out_dir);
  finish_shard_switches(out_dir);  // an earlier run killed while switching its set in

  const int threads = options.threads > 0 ? options.threads : omp_get_max_threads();
  std::vector<std::unique_ptr<Tokenizer>> encoders;
  for (int t = 0; t < threads; ++t) encoders.push_back(tokenizer.clone());

  ShardSink train(options.output_prefix, "train", options.shard_tokens);
  ShardSink val(options.output_prefix, "val", options.shard_tokens);
  const bool with_val = options.val_fraction > 0;
  const int32_t eot = tokenizer.eot();

  // Documents are gathered into batches of about kBatchBytes, encoded in parallel (each
  // thread with its own tokenizer clone), then written in their original order.
  constexpr size_t kBatchBytes = size_t{8} << 20;
  std::vector<std::string> batch;
  size_t batch_bytes = 0;
  std::vector<std::vector<int32_t>> encoded;
  const auto flush = [&] {
    encoded.resize(batch.size());
    const int64_t count = static_cast<int64_t>(batch.size());
#pragma omp parallel for schedule(dynamic, 8) num_threads(threads)
    for (int64_t i = 0; i < count; ++i) {
      encoded[i].clear();
      encoded[i].push_back(eot);
      encoders[omp_get_thread_num()]->encode_append(batch[i], encoded[i]);
    }
    for (int64_t i = 0; i < count; ++i) {
      const int64_t doc = state.documents++;
      const double f = options.val_fraction;
      const bool to_val = with_val && std::floor((doc + 1) * f) > std::floor(doc * f);
      (to_val ? val : train).append(encoded[i]);
      summary.val_documents += to_val;
      state.tokens += static_cast<int64_t>(encoded[i].size());
      state.bytes += static_cast<int64_t>(batch[i].size());
    }
    batch.clear();
    batch_bytes = 0;
    state.seconds = elapsed();
    if (progress) progress(state);
  };

  for (const auto& file : files) {
    const std::string text = read_file(file);
    split_documents(text, options.format, options.separator_line, [&](std::string_view doc) {
      batch.emplace_back(doc);
      batch_bytes += doc.size();
      if (batch_bytes >= kBatchBytes) flush();
    });
  }
  flush();
  train.finish();
  if (with_val) val.finish();

  // Without validation this run writes no val shards, so all old ones are stale.
  summary.removed_stale_shards = stale_shards(options.output_prefix, "train", train.shards().size());
  const auto stale_val = stale_shards(options.output_prefix, "val", val.shards().size());
  summary.removed_stale_shards.insert(summary.removed_stale_shards.end(), stale_val.begin(),
                                      stale_val.end());
  // The new set replaces the old one as a whole (see commit_shard_set): a kill before the
  // journal leaves the old set, one after it the new set once the switch is completed.
  std::vector<ShardRename> renames = train.renames();
  renames.insert(renames.end(), val.renames().begin(), val.renames().end());
  commit_shard_set(options.output_prefix + ".shard-switch", renames, summary.removed_stale_shards);

  summary.bytes = state.bytes_total;
  summary.documents = state.documents;
  summary.train_tokens = train.tokens();
  summary.val_tokens = val.tokens();
  summary.train_shards = train.shards();
  summary.val_shards = val.shards();
  summary.seconds = elapsed();
  state.bytes = state.bytes_total;
  state.seconds = summary.seconds;
  if (progress) progress(state);
  return summary;
}

}  // namespace aiscale::data
