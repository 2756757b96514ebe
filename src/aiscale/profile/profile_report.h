// What `--profile STEPS` leaves behind, and its checks: the trace (trace.json), the op
// table (op_table.json, op_table.md, also printed by rank 0).
#pragma once
#include <cstdint>
#include <string>

#include "aiscale/parallel/comm.h"
#include "aiscale/profile/op_profiler.h"

namespace aiscale::profile {

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
// rank 0's op table into `dir` as <stem>trace.json, <stem>op_table.json and
// <stem>op_table.md; rank 0 prints the table. A collective: every rank calls it.
ProfileFiles write_profile(OpProfiler& p, parallel::Communicator& comm, const std::string& dir,
                           const std::string& stem = "");

}  // namespace aiscale::profile
