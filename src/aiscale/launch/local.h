// Starting N ranks of aiscale on this machine through OpenMPI's mpirun, so that the
// ranks get their identities (OMPI_COMM_WORLD_RANK/SIZE) and a failing rank ends the job;
// then one line that says which ranks failed and why.
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

// Runs mpirun and waits for it (SIGINT and SIGTERM are passed on to it). The ranks record
// their failures in a folder of this launch (AISCALE_FAILURE_DIR, parallel/rank_failure.h);
// when mpirun fails, one summary line goes to stderr. Returns mpirun's exit status (128 +
// the signal when it was killed). Throws Error when mpirun cannot be started.
int run_local_launch(const LocalLaunch& l);

// A rank's failure as it recorded it (AISCALE_FAILURE_DIR/rank-R.json).
struct RankFailureRecord {
  int rank = -1;
  std::string host;
  int exit_code = 1;
  std::string message;
};
// The records in `dir` (unreadable or malformed files are skipped), ordered by rank.
std::vector<RankFailureRecord> read_failure_records(const std::string& dir);

// The summary line of a launch of `ranks` ranks that ended with `status`: which ranks failed
// and why (ranks with the same message grouped), and that the others were ended with them.
// Empty when the status is 0 and no rank failed.
std::string launch_failure_summary(const std::vector<RankFailureRecord>& records, int ranks,
                                   int status);

}  // namespace aiscale::launch
