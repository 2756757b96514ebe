// How a failing rank makes its error reach the user. The job's other ranks may be waiting
// for it in a collective, and a launcher may end this process as soon as a peer exits, so
// a rank that fails:
//   1. prints its message at once, with its rank (the logger's prefix), while its
//      communicator still exists (destroying an MPI or NCCL communicator on an error path
//      can block or end the process before a message printed after it);
//   2. records it: AISCALE_FAILURE_DIR/rank-R.json, which `aiscale launch` reads to print one
//      summary line, and RUN_DIR/errors.log once the run directory exists;
//   3. with peers, ends the job through its communicator (MPI_Abort; NCCL abort), so that no
//      peer waits for it until a time-out.
// Errors every rank finds alike before any communicator exists (a layout the world cannot
// hold, a malformed config) are printed by rank 0 alone: the others only record them.
#pragma once
#include <memory>
#include <string>

#include "aiscale/core/error.h"
#include "aiscale/core/exception_text.h"
#include "aiscale/parallel/comm.h"

namespace aiscale::parallel {

// What a rank's failure report needs: the job's communicator, held here so that it outlives
// the function that built it, and the run directory once there is one.
struct RankContext {
  std::unique_ptr<Communicator> comm;
  std::string run_dir;
};

// An error found from the configuration and the launcher's rank count alone, before any
// communicator: every rank of the job finds the same one.
class AlikeOnEveryRank : public Error {
 public:
  using Error::Error;
};

// Call inside a catch block, with the exception in flight. Without a communicator yet, rethrows
// it for main(). Else prints and records it; then, with peers, ends the job through
// context.comm (does not return); alone, throws ReportedFailure.
[[noreturn]] void report_rank_failure(RankContext& context);

// For main(): the exit status of an exception that reached it (in a catch block), after
// printing it — or, for an AlikeOnEveryRank error on a rank other than 0 of a launched job,
// only recording it — and recording it in the failure directory.
int report_failure_at_exit();

// Writes the failure record of `rank`: AISCALE_FAILURE_DIR/rank-R.json (when the variable is
// set) and a line in RUN_DIR/errors.log (when run_dir is not empty). Never throws.
void record_failure(int rank, const ExceptionText& failure, const std::string& run_dir,
                    bool printed);

}  // namespace aiscale::parallel
