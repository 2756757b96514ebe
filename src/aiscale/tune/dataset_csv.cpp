// CSV to a Dataset, strictly: every problem names the file, the line and the column.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

#include <fmt/format.h>

#include "aiscale/core/error.h"
#include "aiscale/core/fs.h"
#include "aiscale/core/validate.h"
#include "aiscale/tune/dataset.h"

namespace aiscale::tune {
namespace {

std::string trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && (s[b] == ' ' || s[b] == '\t' || s[b] == '\r')) ++b;
  while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t' || s[e - 1] == '\r')) --e;
  std::string out(s.substr(b, e - b));
  if (out.size() >= 2 && out.front() == '"' && out.back() == '"') out = out.substr(1, out.size() - 2);
  return out;
}

std::vector<std::string> split_cells(const std::string& line) {
  std::vector<std::string> cells;
  size_t start = 0;
  for (;;) {
    const size_t comma = line.find(',', start);
    cells.push_back(trim(std::string_view(line).substr(start, comma == std::string::npos ? std::string::npos : comma - start)));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return cells;
}

bool is_missing_marker(const std::string& cell) {
  std::string lower(cell);
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  return lower.empty() || lower == "na" || lower == "n/a" || lower == "nan" || lower == "null" ||
         lower == "none" || lower == "?";
}

}  // namespace

const char* task_kind_name(TaskKind k) {
  return k == TaskKind::regression ? "regression" : "classification";
}

Dataset read_csv(const std::string& path, const std::string& target, TaskKind kind) {
  validate::regular_file(path, "CSV file");
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("CSV file '{}' cannot be opened: check the path and its permissions", path);
  std::string line;
  if (!std::getline(in, line) || trim(line).empty())
    fail("CSV file '{}' is empty: its first line must be a header naming the columns", path);
  const std::vector<std::string> header = split_cells(line);
  int64_t target_col = -1;
  for (size_t c = 0; c < header.size(); ++c) {
    if (header[c].empty())
      fail("CSV file '{}', line 1: column {} has no name: give every column a name in the header",
           path, c + 1);
    if (header[c] == target) target_col = static_cast<int64_t>(c);
  }
  if (target_col < 0)
    fail("CSV file '{}' has no target column '{}': its columns are {}; set data.target to one "
         "of them", path, target, fmt::join(header, ", "));
  if (header.size() < 2)
    fail("CSV file '{}' has only the target column '{}': add at least one feature column", path, target);

  Dataset d;
  d.source = path;
  d.kind = kind;
  d.target = target;
  d.features = static_cast<int64_t>(header.size()) - 1;
  for (size_t c = 0; c < header.size(); ++c)
    if (static_cast<int64_t>(c) != target_col) d.feature_names.push_back(header[c]);

  int64_t line_no = 1;
  while (std::getline(in, line)) {
    ++line_no;
    if (trim(line).empty()) continue;  // blank lines (a trailing newline) carry no row
    const std::vector<std::string> cells = split_cells(line);
    if (cells.size() != header.size())
      fail("CSV file '{}', line {}: {} cells where the header has {} columns: every row needs "
           "one value per column", path, line_no, cells.size(), header.size());
    for (size_t c = 0; c < cells.size(); ++c) {
      const std::string& cell = cells[c];
      if (is_missing_marker(cell))
        fail("CSV file '{}', line {}, column '{}': missing value{}: fill it in or remove the row",
             path, line_no, header[c], cell.empty() ? "" : fmt::format(" ('{}')", cell));
      char* end = nullptr;
      errno = 0;
      const double v = std::strtod(cell.c_str(), &end);
      if (end != cell.c_str() + cell.size())
        fail("CSV file '{}', line {}, column '{}': '{}' is not a number: every cell must be "
             "numeric (encode categories as numbers first)", path, line_no, header[c], cell);
      if (!std::isfinite(v) || std::abs(v) > 3.0e38)
        fail("CSV file '{}', line {}, column '{}': '{}' is not a finite single-precision number",
             path, line_no, header[c], cell);
      if (static_cast<int64_t>(c) == target_col) d.y.push_back(static_cast<float>(v));
      else d.x.push_back(static_cast<float>(v));
    }
    ++d.rows;
  }
  if (d.rows == 0) fail("CSV file '{}' has a header but no rows: add data rows", path);

  if (kind == TaskKind::classification) {
    std::map<float, int64_t> labels;
    for (float v : d.y) labels.emplace(v, 0);
    if (labels.size() < 2)
      fail("CSV file '{}': the target column '{}' holds one class only: classification needs at "
           "least two", path, target);
    if (labels.size() > 10000)
      fail("CSV file '{}': the target column '{}' holds {} different values, too many for "
           "classes: use task = \"regression\"", path, target, labels.size());
    int64_t next = 0;
    for (auto& [value, index] : labels) {
      index = next++;
      d.class_names.push_back(fmt::format("{}", value));
    }
    for (float& v : d.y) v = static_cast<float>(labels.at(v));
    d.classes = static_cast<int64_t>(labels.size());
  }
  return d;
}

void write_csv(const Dataset& d, const std::string& path) {
  std::string out;
  out.reserve(static_cast<size_t>(d.rows * (d.features + 1) * 11));
  for (int64_t f = 0; f < d.features; ++f) out += d.feature_names[f] + ",";
  out += d.target + "\n";
  for (int64_t r = 0; r < d.rows; ++r) {
    for (int64_t f = 0; f < d.features; ++f) out += fmt::format("{:.7g},", d.x[r * d.features + f]);
    out += fmt::format("{:.7g}\n", d.y[r]);
  }
  atomic_write_file(path, out);
}

}  // namespace aiscale::tune
