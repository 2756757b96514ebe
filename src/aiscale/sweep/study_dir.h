// The study directory (docs/guide/scaling.md#the-study-directory): study.toml, study.json (the
// index, replaced atomically on every change), points/<id>/ (see point.h), analysis.json.
#pragma once
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "aiscale/sweep/point.h"
#include "aiscale/sweep/study.h"

namespace aiscale::sweep {

// Creates STUDY_DIR for the study, or reopens it when it holds the same study (same
// study_id). Refuses a folder holding another study (naming both), a corrupt study.json
// (left as it is) and a non-empty folder that is no study. Writes study.toml, every
// point's command.json and study.json; returns the index.
nlohmann::json open_study_dir(const Study& s, const std::string& dir, const std::string& command_line);

// Reads STUDY_DIR/study.json; throws aiscale::Error naming it when missing or corrupt.
nlohmann::json read_study_index(const std::string& dir);
void write_study_index(const std::string& dir, const nlohmann::json& index);

// Re-reads every point folder (point_status) and writes the states into study.json.
// Works without the process that ran the points (e.g. after Slurm jobs). Returns the index.
nlohmann::json refresh_point_states(const std::string& dir);

// Records scheduler information (e.g. {"slurm_job_id": "123"}) of one point in study.json.
void set_point_scheduler(const std::string& dir, const std::string& point_id, const nlohmann::json& info);

struct RunStudyOptions {
  LocalExecutor executor;
  // Called with each progress line ("[2/6] n2-fp32-r1 (2 ranks): finished in 3.1s | ...").
  std::function<void(const std::string&)> progress;
};
struct RunStudyResult {
  int finished = 0, failed = 0, skipped = 0;
};
// Runs every point that is not finished, one after another, on this machine; a failed
// point is recorded with its reason and the study goes on.
RunStudyResult run_study_locally(const std::string& dir, const RunStudyOptions& options);

}  // namespace aiscale::sweep
