// What `--profile STEPS` leaves behind, and its checks: the trace (trace.json), the op
// tables (op_table.json, op_table.md: every rank's; rank 0's and the spread over the ranks
// also printed). In train/, beside the run's other outputs: the files are gathered from
// every rank through a communicator, and profile/ stands below parallel/
// (docs/design/layers.md).
#pragma once
#include <cstdint>
#include <string>

#include "aiscale/parallel/comm.h"
#include "aiscale/profile/op_profiler.h"

namespace aiscale::train {

// Fails, naming --profile and the fix, unless 1 <= steps <= available (the steps after
// warm-up). `raise` names what gives the run more steps ("--steps").
void check_profile_steps(int64_t steps, int64_t available, int64_t warmup, const std::string& raise);

// Fails, naming `what` and the fix, unless a file can be created in `dir` (an existing
// folder, or one that can be made).
void check_writable_dir(const std::string& dir, const std::string& what);

struct ProfileFiles {
  std::string trace, table_json, table_markdown;
};

// Resolves the device spans, then writes the trace (every rank's events, gathered) and
// the op tables into `dir` as <stem>trace.json, <stem>op_table.json and <stem>op_table.md:
// every rank's table, gathered on rank 0, with the spread of each op's total over the
// ranks (op_table_ranks.h); the JSON's top level is rank 0's table. Rank 0 prints its
// table and the spread. A collective: every rank calls it.
ProfileFiles write_profile(profile::OpProfiler& p, parallel::Communicator& comm,
                           const std::string& dir, const std::string& stem = "");

}  // namespace aiscale::train
