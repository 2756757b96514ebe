// Turning text files into token shards: parallel encoding, train/validation split and
// shard rollover over the documents of corpus_input.h. `aiscale data tokenize` is a thin
// layer over tokenize_corpus().
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "aiscale/data/corpus_input.h"
#include "aiscale/data/tokenizer.h"

namespace aiscale::data {

struct TokenizeOptions {
  std::vector<std::filesystem::path> inputs;
  std::string output_prefix;  // shards are PREFIX_val_000000.bin, PREFIX_train_000000.bin, ...
  DocumentFormat format = DocumentFormat::automatic;
  std::optional<std::string> separator_line;
  std::string jsonl_field = "text";     // the member of a JSONL object that holds the text
  bool skip_bad_lines = false;          // JSONL: count malformed lines instead of failing
  double val_fraction = 0.05;           // share of documents that go to validation
  int64_t shard_tokens = 100'000'000;   // tokens per shard at most
  int threads = 0;                      // encoding threads; 0 = all OpenMP threads
};

struct TokenizeProgress {
  int64_t bytes = 0;        // input file bytes (on disk, compressed or not) read so far
  int64_t bytes_total = 0;
  int64_t text_bytes = 0;   // document text encoded so far
  int64_t documents = 0;
  int64_t tokens = 0;       // including one boundary token per document
  double seconds = 0;
  bool finished = false;    // the last call
};

struct TokenizeSummary {
  int64_t files = 0;
  int64_t bytes = 0;        // input files on disk
  int64_t text_bytes = 0;   // document text (decompressed, JSON unescaped)
  int64_t bad_lines = 0;    // JSONL lines left out (skip_bad_lines)
  int64_t documents = 0;
  int64_t val_documents = 0;
  int64_t train_tokens = 0;
  int64_t val_tokens = 0;
  double seconds = 0;
  std::vector<std::filesystem::path> train_shards, val_shards;
  std::vector<std::filesystem::path> removed_stale_shards;  // left over from an earlier run
};

// Reads, splits, encodes and writes. Every document is preceded by the tokenizer's
// boundary token (eot()). Shards hold uint16 ids when the vocabulary has at most 65536
// ids, else uint32 (token_shard.h). Document i (counting from 0 over all files) goes to validation when
// floor((i+1) f) > floor(i f), f = val_fraction: an even spread, exactly round-down(f n)
// documents, independent of thread count. Shards are written atomically; shards with
// the same prefix and a higher index left by an earlier run are removed so that a glob
// over the prefix sees only this run's output. `progress` is called after each batch of
// documents.
TokenizeSummary tokenize_corpus(const TokenizeOptions& options, const Tokenizer& tokenizer,
                                const std::function<void(const TokenizeProgress&)>& progress = {});

// PREFIX_split_000007.bin, llm.c's naming.
std::filesystem::path shard_path(const std::string& prefix, std::string_view split, int64_t index);

}  // namespace aiscale::data
