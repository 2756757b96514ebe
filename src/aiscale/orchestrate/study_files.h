// The files of a scaling study that Slurm submission reads and writes:
//   points/<id>/command.json  {"ranks": n, "argv": [...]}  (written by `aiscale scale`)
//   study.json                the study's index; only the points' states are read here
//   slurm.json                this side's record: the job of every submitted point
// study.json belongs to `aiscale scale`; Slurm submission never rewrites it.
#pragma once
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace aiscale::orchestrate {

struct StudyPoint {
  std::string id;
  int ranks = 1;
  std::vector<std::string> argv;  // aiscale arguments
  std::string dir;                // absolute: STUDY/points/<id>
  std::string study_state;        // from study.json ("finished", "failed", ...); "" if absent
};

// The points of a study, in study.json's order when it lists them, else by ranks then id.
// Throws Error naming the file for a missing points/ folder or a malformed command.json.
std::vector<StudyPoint> read_study_points(const std::string& study_dir);

// One submitted job of a point (the latest is the point's current one).
struct PointJob {
  std::string job_id;      // "123", or "123_4" for an array task
  std::string script;      // relative to the study: slurm/<id>.sbatch
  std::string log;         // relative to the study: points/<id>/log.txt
  std::string submitted;   // ISO 8601
  std::string state;       // last state seen: PENDING, RUNNING, COMPLETED, TIMEOUT, ...
  std::string reason;      // Slurm's reason, or why the state was inferred
  std::string exit_code;   // "0:0" (status:signal) when known
  std::string updated;     // when state was last refreshed
};

struct SlurmRecord {
  std::map<std::string, std::vector<PointJob>> points;  // point id -> jobs, oldest first
  nlohmann::json submissions = nlohmann::json::array();  // {"time", "mode", "jobs": [...]}
  const PointJob* current(const std::string& point) const;
};

std::string slurm_record_path(const std::string& study_dir);  // STUDY/slurm.json
// An absent file is an empty record; a malformed one is an Error naming it.
SlurmRecord load_slurm_record(const std::string& study_dir);
// Written aside and renamed over slurm.json.
void save_slurm_record(const std::string& study_dir, const SlurmRecord& record);

}  // namespace aiscale::orchestrate
