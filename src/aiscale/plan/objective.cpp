// The names of the planner's objectives (--rank), planner.h.
#include <string_view>

#include "aiscale/core/error.h"
#include "aiscale/plan/planner.h"

namespace aiscale::plan {

Objective parse_objective(std::string_view text) {
  if (text == "time" || text == "days") return Objective::time;
  if (text == "gpu-hours") return Objective::gpu_hours;
  if (text == "energy") return Objective::energy;
  if (text == "cost") return Objective::cost;
  if (text == "smallest") return Objective::smallest;
  fail("--rank must be time, gpu-hours, energy, cost or smallest (got '{}')", text);
}

std::string_view to_string(Objective o) {
  switch (o) {
    case Objective::time: return "time";
    case Objective::gpu_hours: return "gpu-hours";
    case Objective::energy: return "energy";
    case Objective::cost: return "cost";
    case Objective::smallest: return "smallest";
  }
  return "?";
}

}  // namespace aiscale::plan
