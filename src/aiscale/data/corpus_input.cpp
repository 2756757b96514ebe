// Input files, gzip and document splitting for `aiscale data tokenize`; see corpus_input.h.
#include "aiscale/data/corpus_input.h"

#include <zlib.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "aiscale/core/enum_names.h"
#include "aiscale/core/error.h"

namespace aiscale::data {
namespace {

bool is_blank(std::string_view text) {
  return std::all_of(text.begin(), text.end(), [](char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
  });
}

std::string name_without_gz(const std::filesystem::path& file) {
  std::string name = file.filename().string();
  if (name.ends_with(".gz")) name.resize(name.size() - 3);
  return name;
}

std::string read_gzip(const std::filesystem::path& path) {
  gzFile in = gzopen(path.c_str(), "rb");
  if (in == nullptr)
    fail("cannot read input file {}: check that it exists and is readable", path.string());
  gzbuffer(in, 1 << 17);
  std::string text;
  std::vector<char> chunk(1 << 20);
  while (true) {
    const int n = gzread(in, chunk.data(), static_cast<unsigned>(chunk.size()));
    if (n < 0) {
      int code = 0;
      const std::string why = gzerror(in, &code);
      gzclose(in);
      fail("input file {} is not valid gzip data ({}); check the file or drop its .gz suffix if "
           "it is not compressed", path.string(), why);
    }
    if (n == 0) break;
    if (gzdirect(in) == 1) {  // zlib passes data without a gzip header through as is
      gzclose(in);
      fail("input file {} is named .gz but is not gzip data; rename it without .gz or "
           "compress it with gzip", path.string());
    }
    text.append(chunk.data(), static_cast<size_t>(n));
  }
  // gzread stops silently at a truncated stream; gzclose_r reports it.
  int code = 0;
  const std::string why = gzerror(in, &code);
  const int status = gzclose(in);
  if (code != Z_OK || (status != Z_OK && status != Z_BUF_ERROR))
    fail("input file {} is a damaged gzip file ({}); download or compress it again", path.string(),
         code != Z_OK ? why : "unexpected end");
  if (status == Z_BUF_ERROR)
    fail("input file {} is a truncated gzip file; download or compress it again", path.string());
  return text;
}

constexpr EnumName<DocumentFormat> document_formats[] = {
    {DocumentFormat::automatic, "auto"}, {DocumentFormat::whole, "whole"},
    {DocumentFormat::paragraphs, "paragraphs"}, {DocumentFormat::lines, "lines"},
    {DocumentFormat::fortune, "fortune"}, {DocumentFormat::jsonl, "jsonl"}};

}  // namespace

DocumentFormat parse_document_format(std::string_view name) {
  return parse_enum(document_formats, name, "document format");
}

std::string_view to_string(DocumentFormat format) { return enum_name(document_formats, format); }

DocumentFormat format_of_file(DocumentFormat format, const std::filesystem::path& file) {
  if (format != DocumentFormat::automatic) return format;
  const std::string name = name_without_gz(file);
  return name.ends_with(".jsonl") || name.ends_with(".ndjson") ? DocumentFormat::jsonl
                                                                : DocumentFormat::whole;
}

void split_documents(std::string_view text, DocumentFormat format,
                     const std::optional<std::string>& separator_line,
                     const std::function<void(std::string_view)>& emit) {
  const auto emit_if_content = [&](std::string_view doc) {
    if (!is_blank(doc)) emit(doc);
  };
  if ((format == DocumentFormat::whole || format == DocumentFormat::automatic) && !separator_line) {
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

void split_jsonl(std::string_view text, std::string_view field, const std::string& file,
                 bool skip_bad_lines, int64_t& bad_lines,
                 const std::function<void(std::string_view)>& emit) {
  int64_t line_number = 0;
  for (size_t line_start = 0; line_start < text.size();) {
    size_t line_end = text.find('\n', line_start);
    if (line_end == std::string_view::npos) line_end = text.size();
    const std::string_view line = text.substr(line_start, line_end - line_start);
    line_start = line_end + 1;
    ++line_number;
    if (is_blank(line)) continue;
    std::string why;
    const nlohmann::json object = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (object.is_discarded())
      why = "is not valid JSON";
    else if (!object.is_object())
      why = "is not a JSON object";
    else if (const auto it = object.find(field); it == object.end())
      why = fmt::format("has no field \"{}\"", field);
    else if (!it->is_string())
      why = fmt::format("has a field \"{}\" that is not a string", field);
    if (why.empty()) {
      const std::string& doc = object.find(field)->get_ref<const std::string&>();
      if (!is_blank(doc)) emit(doc);
      continue;
    }
    if (!skip_bad_lines)
      fail("{}:{}: the line {} (JSONL wants one object per line with the text in \"{}\"); fix "
           "it, name the field with --jsonl-field, or pass --skip-bad-lines to leave such lines "
           "out", file, line_number, why, field);
    ++bad_lines;
  }
}

std::vector<std::filesystem::path> list_input_files(const std::vector<std::filesystem::path>& inputs,
                                                    DocumentFormat format) {
  if (inputs.empty()) fail("no input given: pass text files or directories with --input");
  std::vector<std::filesystem::path> files;
  for (const auto& input : inputs) {
    std::error_code error;
    if (std::filesystem::is_directory(input, error)) {
      std::vector<std::filesystem::path> found;
      // Links to folders inside are not followed (a link cycle would never end).
      std::filesystem::recursive_directory_iterator it(input, error);
      if (error) fail("cannot list input directory {}: {}", input.string(), error.message());
      for (; it != std::filesystem::recursive_directory_iterator(); it.increment(error)) {
        if (error) fail("cannot list input directory {}: {}", input.string(), error.message());
        const std::string name = it->path().filename().string();
        if (name.starts_with(".")) {
          if (it->is_directory()) it.disable_recursion_pending();
          continue;
        }
        if (!it->is_regular_file()) continue;
        if (format == DocumentFormat::fortune && (name.ends_with(".dat") || name.ends_with(".u8")))
          continue;
        found.push_back(it->path());
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

std::string read_input_file(const std::filesystem::path& path) {
  if (path.filename().string().ends_with(".gz")) return read_gzip(path);
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot read input file {}: check that it exists and is readable", path.string());
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace aiscale::data
