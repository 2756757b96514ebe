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

// Writes one split (train or val) into numbered shards of at most `shard_tokens`.
class ShardSink {
 public:
  ShardSink(std::string prefix, std::string split, int64_t shard_tokens, int64_t vocab_size)
      : prefix_(std::move(prefix)), split_(std::move(split)), shard_tokens_(shard_tokens),
        vocab_size_(vocab_size) {}

  void append(std::span<const int32_t> ids) {
    while (!ids.empty()) {
      if (!writer_)
        writer_ = std::make_unique<TokenShardWriter>(shard_path(prefix_, split_, written_.size()), vocab_size_);
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
      writer_ = std::make_unique<TokenShardWriter>(shard_path(prefix_, split_, 0), vocab_size_);
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
  int64_t vocab_size_;
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

std::filesystem::path shard_path(const std::string& prefix, std::string_view split, int64_t index) {
  return fmt::format("{}_{}_{:06d}.bin", prefix, split, index);
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

  ShardSink train(options.output_prefix, "train", options.shard_tokens, tokenizer.vocab_size());
  ShardSink val(options.output_prefix, "val", options.shard_tokens, tokenizer.vocab_size());
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
      state.text_bytes += static_cast<int64_t>(batch[i].size());
    }
    batch.clear();
    batch_bytes = 0;
    state.seconds = elapsed();
    if (progress) progress(state);
  };

  const auto add_document = [&](std::string_view doc) {
    batch.emplace_back(doc);
    batch_bytes += doc.size();
    if (batch_bytes >= kBatchBytes) flush();
  };
  for (const auto& file : files) {
    const std::string text = read_input_file(file);
    if (format_of_file(options.format, file) == DocumentFormat::jsonl)
      split_jsonl(text, options.jsonl_field, file.string(), options.skip_bad_lines,
                  summary.bad_lines, add_document);
    else
      split_documents(text, format_of_file(options.format, file), options.separator_line,
                      add_document);
    state.bytes += static_cast<int64_t>(std::filesystem::file_size(file));
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
  summary.text_bytes = state.text_bytes;
  summary.documents = state.documents;
  summary.train_tokens = train.tokens();
  summary.val_tokens = val.tokens();
  summary.train_shards = train.shards();
  summary.val_shards = val.shards();
  summary.seconds = elapsed();
  state.bytes = state.bytes_total;
  state.seconds = summary.seconds;
  state.finished = true;
  if (progress) progress(state);
  return summary;
}

}  // namespace aiscale::data
