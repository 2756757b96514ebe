// What `aiscale report` accepts: an analysis JSON file, a study directory, or one train
// run's directory, each turned into a validated study analysis.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "aiscale/report/analysis.h"

namespace aiscale::report {

// `path` is
//  - a JSON file of format "aiscale-study-analysis";
//  - a study directory (study.json): its analysis (analysis_of_study_directory);
//  - a tune directory (tune.json or scaling.json of aiscale tune): analyze_tune_directory;
//  - a directory holding analysis.json;
//  - a train run directory (metrics.jsonl): analyze_run_directory.
// Fails with a message naming the path and what is wrong.
StudyInput load_report_input(const std::string& path);

// The analysis of a study directory; adds the files it read to `files_read`.
nlohmann::json analysis_of_study_directory(const std::string& dir,
                                           std::vector<std::string>& files_read);

// Parses a JSON file, failing with the file's name and the parser's position.
nlohmann::json read_json_file(const std::string& path);

}  // namespace aiscale::report
