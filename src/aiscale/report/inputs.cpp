// Dispatch from a path on the command line to a validated study analysis.
#include "aiscale/report/inputs.h"

#include <filesystem>

#include "aiscale/core/error.h"
#include "aiscale/core/fs.h"
#include "aiscale/report/machine_profile_table.h"
#include "aiscale/report/run_analysis.h"
#include "aiscale/report/tune_analysis.h"
#include "aiscale/sweep/analysis.h"

namespace aiscale::report {

namespace fs = std::filesystem;

nlohmann::json read_json_file(const std::string& path) {
  std::string text = read_file(path);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    fail("'{}' is not valid JSON ({}): is it an analysis file, and was it written completely?",
         path, e.what());
  }
}

// The one place where a study directory becomes its analysis: computed afresh from the
// point folders' files (sweep/analysis.h), which also refreshes the cached analysis.json.
nlohmann::json analysis_of_study_directory(const std::string& dir,
                                           std::vector<std::string>& files_read) {
  files_read.push_back((fs::path(dir) / "analysis.json").string());
  return sweep::analyze_study(dir);
}

StudyInput load_report_input(const std::string& path) {
  StudyInput in;
  in.source = path;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st))
    fail("'{}' does not exist: give a study directory, a train run directory or an analysis "
         "JSON file", path);
  nlohmann::json doc;
  std::string named = path;  // what error messages about the document name
  const fs::path p(path);
  if (fs::is_directory(st)) {
    if (fs::exists(p / "study.json")) {
      in.files_read.push_back((p / "study.json").string());
      doc = analysis_of_study_directory(path, in.files_read);
      named = in.files_read.back();
    } else if (fs::exists(p / "tune.json") || fs::exists(p / "scaling.json")) {
      doc = analyze_tune_directory(path, in.files_read);
      named = in.files_read.back();
    } else if (fs::exists(p / "analysis.json")) {
      in.files_read.push_back((p / "analysis.json").string());
      named = in.files_read.back();
      doc = read_json_file(named);
    } else if (fs::exists(p / "metrics.jsonl")) {
      doc = analyze_run_directory(path, in.files_read);
    } else {
      fail("'{}' is neither a study directory (study.json), a tune directory (tune.json), a train "
           "run directory (metrics.jsonl) nor a folder with analysis.json: give one of those", path);
    }
  } else {
    in.files_read.push_back(path);
    doc = read_json_file(path);
  }
  in.analysis = validate_analysis(doc, named);
  // A machine profile at the directory's top is shown beside the study (additive: the
  // analysis format itself does not carry it).
  if (fs::is_directory(st))
    if (nlohmann::json m = machine_profile_summary(path, in.files_read); !m.is_null())
      in.analysis["machine_profile"] = std::move(m);
  return in;
}

}  // namespace aiscale::report
