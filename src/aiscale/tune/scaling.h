// The scaling table: how the wall time of a search grows with the number of models when
// they share the node's threads (and the MPI ranks), against running them one after
// another. For each count N, N models are drawn from the study's space (no halving) and
// cross-validated, N x folds tasks; the serial-equivalent time is the sum of the tasks'
// own durations (what one thread would need to run them in turn), speedup = serial / wall,
// efficiency = speedup / threads.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "aiscale/parallel/comm.h"
#include "aiscale/tune/dataset.h"
#include "aiscale/tune/space.h"

namespace aiscale::tune {

struct ScalingRow {
  int64_t models = 0;
  int64_t tasks = 0;
  int threads = 0;  // over every rank
  int threads_per_task = 1;
  double wall_seconds = 0;
  double serial_seconds = 0;
  double speedup = 0;
  double efficiency = 0;
  double best_score = 0;
};

// "1,100,1000" -> {1, 100, 1000}; fails naming --scaling on anything else.
std::vector<int64_t> parse_model_counts(const std::string& text);

std::vector<ScalingRow> run_scaling(StudyConfig c, const Dataset& d, const std::vector<int64_t>& counts,
                                    parallel::Communicator& comm, bool quiet);
// scaling.csv and scaling.json in the tune directory (rank 0), atomically.
void write_scaling(const StudyConfig& c, const Dataset& d, const std::vector<ScalingRow>& rows, int ranks);
std::string format_scaling_table(const std::vector<ScalingRow>& rows);

}  // namespace aiscale::tune
