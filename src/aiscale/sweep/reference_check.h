// Reference values for a study, as ReFrame states them: for a point (rank count n, and
// optionally a series) a metric's expected value with relative bounds, lower ≤ 0 ≤ upper:
// the point passes when value × (1 + lower) ≤ measured ≤ value × (1 + upper); a bound
// left out is not checked. `aiscale scale --reference FILE` keeps the file in the study
// directory as reference.toml; every analysis of the study then carries the checks
// ("references" in analysis.json), `aiscale scale` ends with status 1 when one fails, and
// `aiscale report` shows them.
//
//   [[reference]]
//   n = 2
//   metric = "throughput_per_device"   # throughput_total, step_time_median_s, speedup,
//                                      # efficiency, mfu, tflops_per_device
//   value = 1000.0
//   lower = -0.05
//   upper = 0.10                       # optional, as lower is
//   series = "aiscale fp32"            # optional: the series' label; default every series
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace aiscale::sweep {

struct Reference {
  int n = 0;
  std::string metric, series;
  double value = 0;
  bool has_lower = false, has_upper = false;
  double lower = 0, upper = 0;
};

// The metrics a reference may name.
const std::vector<std::string>& reference_metrics();

// Reads and checks a reference file (TOML); errors name the file, the entry and the fix.
std::vector<Reference> load_references(const std::string& path);

// Each reference against the analysis' points: one row per (reference, matching series)
// {"series", "n", "metric", "value", "lower", "upper", "measured", "pass", "why"}; a
// reference whose point was not measured is a failed row saying so.
nlohmann::json check_references(const std::vector<Reference>& refs, const nlohmann::json& analysis);

}  // namespace aiscale::sweep
