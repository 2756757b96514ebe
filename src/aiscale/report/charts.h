// The report's charts as Vega-Lite specifications with their data inlined.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace aiscale::report {

struct Chart {
  std::string id;       // stable name: efficiency, speedup, cdf, throughput, loss, power, clock
  std::string title;
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

}  // namespace aiscale::report
