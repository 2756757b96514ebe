// The planner's prediction beside each measured point of a study: for every series point
// (n ranks, one precision), the run it measured (its resolved training config, or its
// benchmark record) planned on a partition the user names, with the same ranks, batch,
// precision and layout; the predicted step time and throughput per device, and the
// measurement over the prediction. `aiscale report STUDY --predict SYSTEM/PARTITION`.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace aiscale::report {

struct PredictOptions {
  std::string target;                     // "karolina/cpu", "leonardo/booster"
  std::vector<std::string> systems;       // extra catalogue files (plan --systems)
  std::vector<std::string> calibration;   // measured results (plan --calibration)
};

// Adds "predicted" to every point of the studies' series: {"target", "step_time_s",
// "throughput_per_device", "ratio"} (ratio: measured over predicted throughput), or
// {"target", "reason"} where the planner cannot plan the run there; and
// study["predicted_on"]. Studies without points (train runs, tune directories) are left as
// they are. Throws Error for an unknown target or catalogue file.
void add_predictions(std::vector<nlohmann::json>& studies, const PredictOptions& o);

}  // namespace aiscale::report
