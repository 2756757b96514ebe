// One point of a study as a job: a folder holding command.json (what to run, on how many
// ranks), and after running log.txt (stdout and stderr), exit_code (the job's exit status
// as text) and run/ (the run directory or the benchmark's output). Any executor that
// writes these files (the local one below, a Slurm job) runs points alike; a point's
// state is read from the files alone.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace aiscale::sweep {

struct PointCommand {
  int ranks = 1;
  std::vector<std::string> argv;  // aiscale arguments after the binary
  int threads_per_rank = 0;       // CPU threads per rank; 0: the executor decides
};

void write_point_command(const std::string& point_dir, const PointCommand& c);
// Throws aiscale::Error naming the file when command.json is missing or malformed.
PointCommand read_point_command(const std::string& point_dir);

struct PointStatus {
  std::string state;   // pending | running | finished | failed | interrupted
  std::string reason;  // failed: exit code and the tail of log.txt; interrupted: the signal
};
// interrupted: the file `interrupted` (a stop signal ended the point; it names the signal).
// finished: run/summary.json says "finished" (train) or run/bench.jsonl holds a record
// (bench), and run/steps.jsonl exists. failed: exit_code is not 0, or it is 0 without those
// results. running: log.txt without exit_code. pending: none of these.
PointStatus point_status(const std::string& point_dir);

// Removes what a previous attempt left (run/, log.txt, exit_code, interrupted) before
// running again.
void clear_point_outputs(const std::string& point_dir);

struct LocalExecutor {
  std::string mpirun = "mpirun";
  std::string self_exe;  // the aiscale binary (default: this process's)
  // After a stop signal, or when processes outlive mpirun: how long the point's processes
  // get to end before they are killed (SIGKILL).
  double stop_timeout_s = 60;
};

struct PointRun {
  int exit_code = 0;    // mpirun's exit status (128 + signal if killed)
  int stop_signal = 0;  // SIGINT or SIGTERM when one ended the point (it is then interrupted)
};
// Runs the point through mpirun on this machine (launch/local.h), stdout and stderr into
// log.txt, and writes exit_code. The point's processes run in a session of their own, each
// with AISCALE_STUDY_POINT set to the point's folder (point_processes.h). Under StopSignals
// (stop_signals.h) a stop signal goes on to them; they get executor.stop_timeout_s to end,
// then are killed, and the point is recorded as interrupted (the file `interrupted`).
// Processes that outlive mpirun are ended the same way, so none runs beside the next point.
PointRun run_point_local(const std::string& point_dir, const LocalExecutor& executor);

// The last `lines` lines of a file ("" if it does not exist).
std::string file_tail(const std::string& path, int lines);

}  // namespace aiscale::sweep
