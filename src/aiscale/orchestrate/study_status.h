// How the Slurm jobs of a study stand (`aiscale slurm status`), waiting for them politely
// (`--wait`), and collecting them (`aiscale slurm collect`): job states into slurm.json,
// then the point states from the points' files (a function of the scale side).
#pragma once
#include <functional>
#include <string>
#include <vector>

namespace aiscale::orchestrate {

struct PointStatus {
  std::string id;
  std::string job_id;      // "" : never submitted
  std::string state;       // Slurm's state; "NOT_SUBMITTED"; "UNKNOWN" (purged, no marker)
  std::string reason;      // Slurm's reason, or how the state was inferred
  std::string exit_code;   // "status:signal" where known
  bool active = false;     // queued or running
  bool died = false;       // TIMEOUT, NODE_FAIL, CANCELLED, OUT_OF_MEMORY, FAILED, ...
  bool completed = false;  // COMPLETED with exit status 0
  std::string log;         // absolute path of the point's log
  std::string log_tail;    // last lines of the log, for died jobs
};

// One poll of Slurm for every point's current job; the states are written to slurm.json
// (atomically). A job Slurm no longer knows is judged by the last line its script
// writes to the log ("aiscale-slurm: exit status N"), else it is UNKNOWN (not active).
std::vector<PointStatus> poll_study(const std::string& study_dir, int tail_lines = 15);

struct WaitOptions {
  double timeout_s = 3600;    // give up (Error) after this long
  double first_poll_s = 2;    // the first wait; each next one 1.5 times longer ...
  double max_poll_s = 60;     // ... up to this
};
// Polls until no point is active; returns the last statuses. Throws Error naming the
// points still queued or running when the timeout passes. `progress` sees each poll.
std::vector<PointStatus> wait_for_study(
    const std::string& study_dir, const WaitOptions& options,
    const std::function<void(const std::vector<PointStatus>&)>& progress = {});

// A table for people: point, job, state, exit code, reason; then the log tail of each
// died job.
std::string format_status(const std::vector<PointStatus>& statuses);

// `aiscale slurm collect`: one poll (job states into slurm.json), then
// `refresh_points(study_dir)` when given: the scale side's re-reading of the point
// folders into study.json (sweep::refresh_point_states).
std::vector<PointStatus> collect_study(
    const std::string& study_dir,
    const std::function<void(const std::string&)>& refresh_points = {});

}  // namespace aiscale::orchestrate
