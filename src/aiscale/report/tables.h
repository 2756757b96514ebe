// The report's tables as plain text cells, shared by the HTML and Markdown renderers.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace aiscale::report {

struct Table {
  std::string id;       // stable name ("points", "environment", "failed")
  std::string title;
  std::string caption;  // one sentence on what the rows are
  std::vector<std::string> columns;
  std::vector<std::vector<std::string>> rows;  // each as wide as columns; text, unescaped
};

// Tables of labelled studies (label_studies): per-point figures, Amdahl fits, the
// environment of each study, and failed points (always present, possibly empty).
std::vector<Table> build_tables(const std::vector<nlohmann::json>& studies);

// Number formatting for people: 4 significant digits; "—" for null.
std::string format_figure(const nlohmann::json& value);
// "median (min–max)" of a {"median","min","max"} spread, or "—".
std::string format_spread(const nlohmann::json& spread);

}  // namespace aiscale::report
