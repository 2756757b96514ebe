// A tune directory (aiscale tune) seen as a study analysis of kind "tune", so that
// `aiscale report TUNE_DIR` draws it: the analysis has no rank series; its "tune" object
// holds each trial's score with the best so far (in trial order) and, when the directory
// has scaling.json, the scaling table (models, wall and serial-equivalent time, speedup,
// efficiency).
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "aiscale/report/charts.h"

namespace aiscale::report {

// Reads DIR/tune.json (a search; absent where only --scaling ran), results.json and
// scaling.json (each when present; at least one of them), adding every file read to
// `files_read`.
nlohmann::json analyze_tune_directory(const std::string& dir, std::vector<std::string>& files_read);

// The charts of the studies that have a "tune" object: wall and serial-equivalent time
// against models, best score against trials. Empty when none has.
std::vector<Chart> tune_charts(const std::vector<nlohmann::json>& studies);
// Those of studies of training runs (study.backend = "train"): every trial's validation
// curve coloured by how it ended, and each searched key's importance.
std::vector<Chart> train_search_charts(const std::vector<nlohmann::json>& studies);

}  // namespace aiscale::report
