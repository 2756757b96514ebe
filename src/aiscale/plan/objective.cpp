// The names of the planner's objectives (--rank), planner.h.
#include <optional>
#include <string_view>

#include "aiscale/core/enum_names.h"
#include "aiscale/core/error.h"
#include "aiscale/plan/planner.h"

namespace aiscale::plan {

namespace {

// "days" is another name for time.
constexpr EnumName<Objective> objectives[] = {
    {Objective::time, "time"}, {Objective::time, "days"},     {Objective::gpu_hours, "gpu-hours"},
    {Objective::energy, "energy"}, {Objective::cost, "cost"}, {Objective::smallest, "smallest"}};

}  // namespace

Objective parse_objective(std::string_view text) {
  if (const std::optional<Objective> o = find_enum(objectives, text)) return *o;
  fail("--rank must be {} (got '{}')", enum_choices(objectives), text);
}

std::string_view to_string(Objective o) { return enum_name(objectives, o); }

}  // namespace aiscale::plan
