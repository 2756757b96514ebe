// Starting N ranks of aiscale on this machine through OpenMPI's mpirun, so that the
// ranks get their identities (OMPI_COMM_WORLD_RANK/SIZE) and a failing rank ends the job.
#pragma once
#include <string>
#include <vector>

namespace aiscale::launch {

struct LocalLaunch {
  int ranks = 2;
  int threads_per_rank = 0;  // 0: cores / ranks (at least 1)
  std::string mpirun = "mpirun";
  std::vector<std::string> extra_mpirun_args;
  std::vector<std::string> command;  // aiscale arguments, e.g. {"train", "--config", "x.toml"}
};

// The full argv that will be executed (exposed for tests and --dry-run).
std::vector<std::string> local_launch_argv(const LocalLaunch& l, const std::string& self_exe);
// Replaces this process with mpirun; returns only by throwing Error.
[[noreturn]] void exec_local_launch(const LocalLaunch& l);

}  // namespace aiscale::launch
