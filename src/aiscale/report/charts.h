// The report's charts as Vega-Lite specifications with their data inlined.
#pragma once
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace aiscale::report {

struct Chart {
  std::string id;       // stable name: efficiency, speedup, cdf, throughput, loss, power, clock
  std::string title;    // title and caption: report/charts.md
  std::string caption;  // what is drawn and how to read it
  nlohmann::json spec;  // a complete Vega-Lite spec (data values inlined)
};

// Charts of labelled studies (label_studies). A chart is left out when it would be empty:
// efficiency and speedup need a series with two rank counts, power and clock need a
// measured value, CDF and loss need their records.
std::vector<Chart> build_charts(const std::vector<nlohmann::json>& studies);

// The CDF's points (step time, fraction of steps at or below it) of ascending step times,
// thinned to at most max_points evenly spaced ranks (the first and last kept).
std::vector<std::pair<double, double>> cdf_points(const std::vector<double>& sorted_times,
                                                  size_t max_points);

// Pieces of the charts' Vega-Lite specifications, for every chart of the report.
namespace vega {
// A spec of `values` (inlined) at the report's chart size, its legend below the chart in
// `legend_columns` columns.
nlohmann::json spec(nlohmann::json values, int legend_columns);
// An encoding of a nominal field, with its title.
nlohmann::json nominal(const char* field, const char* title);
// An encoding of a quantitative field, with its title (null: none) and, where given, the
// scale's properties ({{"zero", false}}).
nlohmann::json quantitative(const char* field, nlohmann::json title,
                            nlohmann::json scale = nullptr);
// The mark of a line with a point at each value.
nlohmann::json line_with_points();
// The chart `id` drawn by `spec`, with its title and caption (report/charts.md).
Chart chart(const std::string& id, nlohmann::json spec);
// The chart `id` of one `mark` with `encoding` over `spec` (the data and size, as spec()
// makes it).
Chart with_mark(const std::string& id, nlohmann::json spec, nlohmann::json mark,
                nlohmann::json encoding);
// A tooltip: the fields, each with its type.
nlohmann::json tooltip(std::initializer_list<std::pair<const char*, const char*>> fields);
}  // namespace vega

}  // namespace aiscale::report
