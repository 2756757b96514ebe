// The processes of a point run on this machine: mpirun, its daemons and the ranks. Each
// inherits the variable AISCALE_STUDY_POINT (the point's folder, absolute) from the process
// `aiscale scale` starts, so they are found by it whatever process group or session they
// put themselves in (OpenMPI gives every rank a process group of its own) and also after
// the `aiscale scale` that started them is gone.
#pragma once
#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

namespace aiscale::sweep {

inline constexpr const char* kPointEnv = "AISCALE_STUDY_POINT";

struct PointProcess {
  pid_t pid = 0;
  std::string point_dir;  // the value of AISCALE_STUDY_POINT
  std::string command;    // its command line, for messages ("mpirun -np 2 ...")
};

// Live processes of this user whose AISCALE_STUDY_POINT is `point_dir`, or lies under it
// when `point_dir` ends with '/' (all points of a study: "STUDY/points/"). This process is
// never among them.
std::vector<PointProcess> find_point_processes(const std::string& point_dir);

// Sends `sig` to each (those that ended meanwhile are skipped).
void signal_processes(const std::vector<PointProcess>& processes, int sig);

// Ends the processes of `point_dir`: sends `sig` (0: none, they have had one), waits until
// `deadline_s` seconds from now for them to end, then SIGKILLs what is left and waits a
// little more for it. Returns how many processes there were at the start.
int end_point_processes(const std::string& point_dir, int sig, double deadline_s);

// Starts argv (looked up on PATH) with the environment `env` in a session and process group
// of its own (stopped as one; the terminal's Ctrl-C reaches it only through the caller),
// its output written to `log` after a "$ command" line (the file truncated, or appended to
// with `append`), stdin /dev/null; `exec_failed` is what the log says when argv cannot run.
// `on_started(pid)` runs with SIGINT and SIGTERM blocked, so a stop signal is handled only
// once the caller knows the child. Throws Error when the log or the process cannot be made.
pid_t start_logged_process(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                           const std::string& log, bool append, const std::string& exec_failed,
                           const std::function<void(pid_t)>& on_started = {});

// "123 (mpirun -np 2 ...), 124 (aiscale bench ...)": at most `max` of them, then "and N more".
std::string describe_processes(const std::vector<PointProcess>& processes, size_t max = 4);

}  // namespace aiscale::sweep
