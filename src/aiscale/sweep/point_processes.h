// The processes of a point run on this machine: mpirun, its daemons and the ranks. Each
// inherits the variable AISCALE_STUDY_POINT (the point's folder, absolute) from the process
// `aiscale scale` starts, so they are found by it whatever process group or session they
// put themselves in (OpenMPI gives every rank a process group of its own) and also after
// the `aiscale scale` that started them is gone.
#pragma once
#include <sys/types.h>

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

// "123 (mpirun -np 2 ...), 124 (aiscale bench ...)": at most `max` of them, then "and N more".
std::string describe_processes(const std::vector<PointProcess>& processes, size_t max = 4);

}  // namespace aiscale::sweep
