// The report as Markdown (its tables) and as CSV (one row per series point).
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace aiscale::report {

// Heading, then every table of build_tables as a GitHub-flavoured Markdown table.
std::string render_markdown(const std::vector<nlohmann::json>& studies);

// Header line, then one row per point of every series of every study: study, kind,
// series, source, precision, unit, n, repeats, the spreads as median/min/max columns,
// step time, speedup, efficiencies, memory, power, clock (empty cell = not measured).
std::string render_csv(const std::vector<nlohmann::json>& studies);

// RFC 4180 field: quoted when it holds a comma, quote or line break; text that a
// spreadsheet would run as a formula (=, +, -, @ first) is prefixed with a quote mark.
std::string csv_field(std::string_view text, bool is_text);

}  // namespace aiscale::report
