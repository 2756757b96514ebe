// The planner's objectives (--rank): their names (planner.h), the GPU count each picks on a
// partition and the order of the partitions (objective.h).
#include "aiscale/plan/objective.h"

#include <algorithm>
#include <optional>
#include <string_view>

#include <fmt/format.h>

#include "aiscale/core/enum_names.h"
#include "aiscale/core/error.h"
#include "aiscale/plan/planner.h"
#include "aiscale/plan/units.h"

namespace aiscale::plan {

namespace {

// "days" is another name for time.
constexpr EnumName<Objective> objectives[] = {
    {Objective::time, "time"}, {Objective::time, "days"},     {Objective::gpu_hours, "gpu-hours"},
    {Objective::energy, "energy"}, {Objective::cost, "cost"}, {Objective::smallest, "smallest"}};

// The first candidate whose field is 1 % below every earlier choice's: fewer GPUs win
// a near tie.
const Candidate* least(const std::vector<const Candidate*>& ok, double Candidate::*field) {
  const Candidate* best = ok.front();
  for (const Candidate* c : ok)
    if (c->*field < best->*field * 0.99) best = c;
  return best;
}

}  // namespace

Objective parse_objective(std::string_view text) {
  if (const std::optional<Objective> o = find_enum(objectives, text)) return *o;
  fail("--rank must be {} (got '{}')", enum_choices(objectives), text);
}

std::string_view to_string(Objective o) { return enum_name(objectives, o); }

std::optional<Candidate> choose_count(const PlanRequest& r, const std::vector<Candidate>& runs,
                                      std::string& why) {
  std::vector<const Candidate*> ok;  // the base, and every count at --min-efficiency
  for (const auto& c : runs)
    if (&c == &runs.front() || c.scaling >= r.min_efficiency) ok.push_back(&c);
  if (ok.empty()) return std::nullopt;
  auto seconds = [](const Candidate* c) { return c->days * 86400.0; };
  if (r.deadline_s) {
    std::vector<const Candidate*> in_time;
    for (const Candidate* c : ok)
      if (seconds(c) <= *r.deadline_s) in_time.push_back(c);
    if (in_time.empty()) {
      const Candidate* fastest = *std::min_element(ok.begin(), ok.end(), [&](auto* x, auto* y) {
        return seconds(x) < seconds(y);
      });
      why = fmt::format("cannot finish within the deadline of {} at {:.0f}% efficiency or more: "
                        "the fastest is {} on {} GPUs", duration(*r.deadline_s),
                        r.min_efficiency * 100, duration(seconds(fastest)), fastest->layout.gpus());
      return std::nullopt;
    }
    ok = in_time;
  }
  switch (r.objective) {
    case Objective::smallest:
      return *ok.front();
    case Objective::cost:    // one partition: its price is a constant factor
    case Objective::gpu_hours:
      return *least(ok, &Candidate::gpu_hours);
    case Objective::energy:
      // Not GPU-hours times one factor: a count that leaves GPUs of its nodes idle counts
      // them at the idle share of board power.
      return *least(ok, &Candidate::energy_kwh);
    case Objective::time: {
      // More GPUs only while the run is still longer than --min-duration (a deadline
      // shorter than that is already met by the filter above).
      const Candidate* best = ok.front();
      for (size_t i = 1; i < ok.size(); ++i) {
        if (seconds(best) <= r.min_duration_s) break;
        best = ok[i];
      }
      return *best;
    }
  }
  return *ok.front();
}

bool ranks_before(const PlanRequest& r, const Candidate& x, const Candidate& y) {
  if (x.runs() != y.runs()) return x.runs();
  switch (r.objective) {
    case Objective::gpu_hours: return x.gpu_hours < y.gpu_hours;
    case Objective::energy:
      // Partitions without a power figure after those with one, among them by GPU-hours.
      if ((x.energy_kwh > 0) != (y.energy_kwh > 0)) return x.energy_kwh > 0;
      return x.energy_kwh > 0 ? x.energy_kwh < y.energy_kwh : x.gpu_hours < y.gpu_hours;
    case Objective::cost:
      // Partitions without a price after those with one, among them by GPU-hours.
      if ((x.cost >= 0) != (y.cost >= 0)) return x.cost >= 0;
      return x.cost >= 0 ? x.cost < y.cost : x.gpu_hours < y.gpu_hours;
    case Objective::smallest:
      if (x.layout.gpus() != y.layout.gpus()) return x.layout.gpus() < y.layout.gpus();
      return x.days < y.days;
    case Objective::time: break;
  }
  return x.days < y.days;
}

}  // namespace aiscale::plan
