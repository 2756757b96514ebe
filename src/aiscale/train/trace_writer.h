// Chrome trace-event JSON (the format Perfetto, ui.perfetto.dev, and chrome://tracing
// open): {"traceEvents": [...]} with one process per rank (pid = rank), one thread per
// track (tid: the stepping thread, data loading, communication, each GPU stream), "M"
// metadata events naming them, "X" complete events for steps, phases, ops and buckets,
// and a "B"/"E" pair around each rank's profiled window. Times are microseconds.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "aiscale/parallel/comm.h"
#include "aiscale/profile/op_profiler.h"

namespace aiscale::train {

// This rank's events.
nlohmann::json trace_events(const profile::OpProfiler& p, const std::string& host);

// Every rank's events gathered on rank 0, which writes `path` (write aside + rename); a
// collective: every rank calls it.
void write_trace(const profile::OpProfiler& p, parallel::Communicator& comm,
                 const std::string& path);

// Text of every rank, gathered on rank 0 (others get an empty list); a collective.
std::vector<std::string> gather_text(parallel::Communicator& comm, const std::string& mine);

}  // namespace aiscale::train
