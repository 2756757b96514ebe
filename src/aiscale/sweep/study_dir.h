// The study directory (docs/guide/scaling.md#the-study-directory): study.toml, study.json (the
// index, replaced atomically on every change), points/<id>/ (see point.h), analysis.json.
#pragma once
#include <functional>
#include <string>
#include <vector>

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
  std::vector<std::string> failed_points;  // ids of the points that failed in this run
  std::string interrupted_point;           // the point a stop signal ended ("" if none)
  int stop_signal = 0;                     // SIGINT or SIGTERM when one stopped the study
};
// Runs every point that is not finished, one after another, on this machine; a failed
// point is recorded with its reason and the study goes on. Refuses to start while another
// `aiscale scale` runs the study (STUDY_DIR/scale.lock) or while processes of an earlier
// run of its points are alive (point_processes.h), naming them. A stop signal (SIGINT,
// SIGTERM) ends the running point's processes, records it as interrupted and returns
// without running the others (stop_signals.h).
RunStudyResult run_study_locally(const std::string& dir, const RunStudyOptions& options);

// What this machine can start through mpirun, for check_local_capacity.
struct LocalCapacity {
  int cores = 1;               // cores this process may run on (its CPU affinity)
  int gpus = 0;                // GPUs it sees
  bool cuda_build = false;     // this aiscale has the CUDA backend
  bool oversubscribe = false;  // the user allows more than kMaxRanksPerCore ranks per core
};
// Ranks per core a local study starts at most without --oversubscribe: beyond that a point
// measures the operating system's scheduler more than the workload, and a count in the
// hundreds or thousands is a study meant for a cluster.
inline constexpr int kMaxRanksPerCore = 4;
LocalCapacity this_machine();
// Refuses, before any point runs, a study this machine cannot run: a CUDA study on a build
// without CUDA, a GPU point with more ranks than GPUs (one rank per GPU), a CPU point with
// more than kMaxRanksPerCore ranks per core (unless oversubscribe). Names the point and the
// fix.
void check_local_capacity(const Study& s, const LocalCapacity& machine);

// Throws Error when processes of the study's points from an earlier run are still alive
// (left behind by an `aiscale scale` that was killed, or run by another one), naming the
// points, the processes and how to end them.
void check_no_point_processes(const std::string& dir);

}  // namespace aiscale::sweep
