// The input side of `aiscale data tokenize`: which files to read, reading them (gzip'd
// or not), and cutting their text into documents (text formats and JSONL).
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace aiscale::data {

enum class DocumentFormat {
  automatic,   // jsonl for *.jsonl / *.ndjson (gzip'd or not), whole for other files
  whole,       // each file is one document
  paragraphs,  // documents are separated by blank (whitespace-only) lines
  lines,       // each non-blank line is a document
  fortune,     // Debian fortune files: entries separated by lines holding only "%"
  jsonl,       // one JSON object per line; the document is one string field of it
};

// "auto", "whole", "paragraphs", "lines", "fortune", "jsonl" <-> the enum; throws
// aiscale::Error.
DocumentFormat parse_document_format(std::string_view name);
std::string_view to_string(DocumentFormat format);

// The format a file is read in: `format`, or for automatic what its name says.
DocumentFormat format_of_file(DocumentFormat format, const std::filesystem::path& file);

// Calls `emit` with each document of `text` in order (a text format, not jsonl).
// Separator lines and blank lines around documents are dropped; a document's own text
// (newlines included) is kept byte for byte. Documents that are empty or
// whitespace-only are skipped. With `separator_line`, a line exactly equal to it (a
// trailing '\r' ignored) ends a document, whatever `format` says.
void split_documents(std::string_view text, DocumentFormat format,
                     const std::optional<std::string>& separator_line,
                     const std::function<void(std::string_view)>& emit);

// JSONL: each non-blank line is a JSON object whose string member `field` is a document
// (empty or whitespace-only ones are skipped). A line that is not such an object is an
// aiscale::Error naming `file`:line, unless `skip_bad_lines`; then it is counted in
// `bad_lines`.
void split_jsonl(std::string_view text, std::string_view field, const std::string& file,
                 bool skip_bad_lines, int64_t& bad_lines,
                 const std::function<void(std::string_view)>& emit);

// The files to read: a file argument as is; a directory's regular files, recursively,
// sorted by path, hidden files and folders skipped, links to folders not followed. In fortune format the index files
// *.dat and the *.u8 duplicates are skipped. Throws aiscale::Error for a missing input
// or when nothing is left to read.
std::vector<std::filesystem::path> list_input_files(const std::vector<std::filesystem::path>& inputs,
                                                    DocumentFormat format);

// The file's bytes; a *.gz file is decompressed (zlib; concatenated members too). Throws
// aiscale::Error naming the file for an unreadable or corrupt one.
std::string read_input_file(const std::filesystem::path& path);

}  // namespace aiscale::data
