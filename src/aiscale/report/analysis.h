// The study analysis that `aiscale report` draws: the JSON document of format
// "aiscale-study-analysis" (version 1) that sweep::analyze_study computes, or that
// analyze_run_directory derives from one train run. Checked here once, so the renderers
// can read every field they use without re-checking it.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace aiscale::report {

inline constexpr const char* kAnalysisFormat = "aiscale-study-analysis";
inline constexpr int kAnalysisVersion = 1;

// One analysis to report and where it came from.
struct StudyInput {
  std::string source;                   // what the user named (file or directory)
  nlohmann::json analysis;              // validated and normalized (see validate_analysis)
  std::vector<std::string> files_read;  // every file it was read from (never overwritten)
};

// Checks `doc` against the analysis format; on a problem fails with a message naming
// `source` and the field (e.g. "series[0].points[2].n"). Returns the document with the
// optional parts filled in: absent cdf/loss_curves/failed_points become empty arrays, an
// absent series source becomes "aiscale", absent nullable figures become null.
nlohmann::json validate_analysis(const nlohmann::json& doc, const std::string& source);

// Several studies side by side: series, CDF and loss-curve labels are prefixed with the
// study's name when the names differ (with "name #k" when two studies share a name), so
// every label in the report is unique. One study is returned unchanged.
std::vector<nlohmann::json> label_studies(const std::vector<StudyInput>& inputs);

}  // namespace aiscale::report
