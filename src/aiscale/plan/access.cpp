#include "aiscale/plan/access.h"

#include <algorithm>

#include <fmt/format.h>

#include "aiscale/core/error.h"
#include "aiscale/plan/catalog.h"
#include "aiscale/plan/units.h"

namespace aiscale::plan {

Applicant parse_applicant(std::string_view text) {
  if (text == "new") return Applicant::new_user;
  if (text == "experienced") return Applicant::experienced;
  fail("--applicant must be 'new' (a new user, SME or start-up) or 'experienced' (familiar with "
       "HPC) (got '{}')", text);
}

std::string_view to_string(Applicant a) {
  return a == Applicant::new_user ? "new" : "experienced";
}

std::string AccessCall::limits() const {
  std::string hours;
  if (max_gpu_hours) hours = fmt::format("up to {} GPU-hours", with_commas(static_cast<int64_t>(*max_gpu_hours)));
  else if (min_gpu_hours > 0) hours = fmt::format("more than {} GPU-hours", with_commas(static_cast<int64_t>(min_gpu_hours)));
  else hours = "GPU-hour limit not published";
  return fmt::format("{}, {}; {}; for {} (source: {}, seen {})", hours,
                     period.empty() ? "period not published" : period,
                     turnaround.empty() ? "timing not published" : turnaround, audience, url, seen);
}

namespace {

constexpr double kSecondsPerMonth = 30.44 * 86400.0;

bool holds(const AccessCall& c, double gpu_hours, double seconds) {
  if (c.max_gpu_hours && gpu_hours > *c.max_gpu_hours) return false;
  if (gpu_hours <= c.min_gpu_hours) return false;
  if (c.max_months && seconds > *c.max_months * kSecondsPerMonth) return false;
  return true;
}

bool open_to(const AccessCall& c, Applicant who) {
  return who == Applicant::new_user ? c.new_users : c.experienced;
}

}  // namespace

AccessRoute access_route(const std::vector<AccessCall>& calls, double gpu_hours, double seconds,
                         const System& system, bool cpu_partition, Applicant who) {
  if (!system.eurohpc)
    return {"site allocation", "not a EuroHPC system: apply through the site's own allocation process",
            "", {}};
  AccessRoute route;
  for (const auto& c : calls) {
    const bool ai = c.programme == "EuroHPC AI Factories";
    if (cpu_partition && ai) continue;  // sized in GPU-hours
    if (!holds(c, gpu_hours, seconds)) continue;
    if (ai && route.name.empty() && open_to(c, who)) {
      route.name = c.name;
      route.call_id = c.id;
      route.detail = c.limits();
    } else if (!ai) {
      route.also.push_back(fmt::format("{} ({})", c.name, c.purpose));
    }
  }
  if (route.name.empty()) {
    if (cpu_partition) {
      route.name = "CPU allocation";
      route.detail = "node-hours on a CPU partition: the AI Factory calls are sized in GPU-hours; "
                     "apply through the EuroHPC JU access calls or the site";
    } else {
      double longest = 0;
      for (const auto& c : calls)
        if (c.max_months) longest = std::max(longest, *c.max_months);
      route.name = "none fits";
      std::string other;  // a call that holds the run but is for another audience
      for (const auto& c : calls)
        if (c.programme == "EuroHPC AI Factories" && holds(c, gpu_hours, seconds) && !open_to(c, who))
          other = c.name;
      route.detail = !other.empty()
                         ? fmt::format("{} holds the run but is for {}; a new user starts with the "
                                       "Playground (up to its GPU-hours) or applies as such "
                                       "(--applicant)", other,
                                       who == Applicant::new_user ? "users familiar with HPC" : "new users")
                     : longest > 0 && seconds > longest * kSecondsPerMonth
                         ? fmt::format("the run takes {}, longer than the longest allocation period "
                                       "published ({:.0f} months): use more GPUs or split it over "
                                       "allocations", duration(seconds), longest)
                         : "no call in the catalogue holds this run (data/systems/access.toml)";
    }
  }
  return route;
}

}  // namespace aiscale::plan
