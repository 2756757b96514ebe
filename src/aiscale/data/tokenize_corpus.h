// Turning text files into token shards: input listing, document splitting, parallel
// encoding, train/validation split and shard rollover. `aiscale data tokenize` is a
// thin layer over tokenize_corpus().
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "aiscale/data/tokenizer.h"

namespace aiscale::data {

enum class DocumentFormat {
  whole,       // each file is one document
  paragraphs,  // documents are separated by blank (whitespace-only) lines
  lines,       // each non-blank line is a document
  fortune,     // Debian fortune files: entries separated by lines holding only "%"
};

// "whole", "paragraphs", "lines", "fortune" <-> the enum; throws aiscale::Error.
DocumentFormat parse_document_format(std::string_view name);
std::string_view to_string(DocumentFormat format);

// Calls `emit` with each document of `text` in order. Separator lines and blank lines
// around documents are dropped; a document's own text (newlines included) is kept
// byte for byte. Documents that are empty or whitespace-only are skipped. With
// `separator_line`, a line exactly equal to it (a trailing '\r' ignored) ends a
// document, whatever `format` says.
void split_documents(std::string_view text, DocumentFormat format,
                     const std::optional<std::string>& separator_line,
                     const std::function<void(std::string_view)>& emit);

// The files to read: a file argument as is; a directory's regular files (not
// recursive, hidden files skipped), sorted by name. In fortune format the index files
// *.dat and the *.u8 duplicates are skipped. Throws aiscale::Error for a missing input
// or when nothing is left to read.
std::vector<std::filesystem::path> list_input_files(const std::vector<std::filesystem::path>& inputs,
                                                    DocumentFormat format);

struct TokenizeOptions {
  std::vector<std::filesystem::path> inputs;
  std::string output_prefix;  // shards are PREFIX_val_000000.bin, PREFIX_train_000000.bin, ...
  DocumentFormat format = DocumentFormat::whole;
  std::optional<std::string> separator_line;
  double val_fraction = 0.05;           // share of documents that go to validation
  int64_t shard_tokens = 100'000'000;   // tokens per shard at most
  int threads = 0;                      // encoding threads; 0 = all OpenMP threads
};

struct TokenizeProgress {
  int64_t bytes = 0;      // input bytes encoded so far
  int64_t bytes_total = 0;
  int64_t documents = 0;
  int64_t tokens = 0;     // including one end-of-text token per document
  double seconds = 0;
};

struct TokenizeSummary {
  int64_t files = 0;
  int64_t bytes = 0;
  int64_t documents = 0;
  int64_t val_documents = 0;
  int64_t train_tokens = 0;
  int64_t val_tokens = 0;
  double seconds = 0;
  std::vector<std::filesystem::path> train_shards, val_shards;
  std::vector<std::filesystem::path> removed_stale_shards;  // left over from an earlier run
};

// Reads, splits, encodes and writes. Every document is preceded by the end-of-text
// token. Document i (counting from 0 over all files) goes to validation when
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
