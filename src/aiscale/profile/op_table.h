// The op table of a profile: per op (and per data-loading and communication kind) the
// calls, total and mean time, share of the step and the achieved rate where the op's work
// or traffic is known, over the profiled steps of one rank.
//
// Which spans are rows: the ops of the GPU streams where the model records them (the time
// the device spent, not the host's launch time), else the host's op spans; beside them
// the host's data-loading and communication spans. Phases and steps only enclose rows.
//
// Overlapped rows: the collectives on the data-parallel communicator's stream (gradient
// buckets, gathers, ZeRO-1's weight all-gather) run beside the model's stream, so their
// time is not added to the rows' total (which stays comparable with the step time); they
// are listed apart, each with its share of the step and its achieved GB/s.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "aiscale/profile/op_profiler.h"

namespace aiscale::profile {

struct OpRow {
  std::string name;
  std::string kind;  // "op", "data" or "comm"
  std::string where; // "host" or "gpu"
  bool overlapped = false;  // on a stream beside the model's: not in the rows' total
  int64_t calls = 0;
  double total_s = 0;
  double flops = 0, bytes = 0;  // summed over the calls (0: unknown)
  double mean_s() const { return calls > 0 ? total_s / double(calls) : 0; }
  double tflops() const { return flops > 0 && total_s > 0 ? flops / total_s / 1e12 : 0; }
  double gbytes_per_s() const { return bytes > 0 && total_s > 0 ? bytes / total_s / 1e9 : 0; }
};

struct OpTable {
  int rank = 0;
  int64_t steps = 0;
  double step_time_s = 0;  // the profiled steps' measured time, summed
  std::vector<OpRow> rows; // by total time, largest first
  // The rows that are not overlapped, summed; and the overlapped ones.
  double rows_total_s() const;
  double overlapped_total_s() const;
  // The rows' total as a fraction of the steps' time (1.0: every moment is accounted for;
  // on GPUs above 1 is possible where streams overlap).
  double coverage() const { return step_time_s > 0 ? rows_total_s() / step_time_s : 0; }
};

OpTable make_op_table(const OpProfiler& p);
nlohmann::json op_table_json(const OpTable& t);
// Back from op_table_json (the tables of the other ranks travel as JSON).
OpTable op_table_from_json(const nlohmann::json& j);
std::string op_table_markdown(const OpTable& t);

}  // namespace aiscale::profile
