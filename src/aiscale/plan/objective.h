// What the planner's objective (--rank, PlanRequest::objective) decides: the GPU count it
// picks among one partition's candidates, and the order of the partitions' picks.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "aiscale/plan/planner.h"

namespace aiscale::plan {

// Among one partition's candidates over the GPU counts searched (`runs`, the fewest GPUs
// first), the one the objective picks: the first count and those at --min-efficiency
// (Candidate::scaling, per GPU allocated), within --deadline; nothing, with `why` saying
// so, where none finishes in time.
std::optional<Candidate> choose_count(const PlanRequest& r, const std::vector<Candidate>& runs,
                                      std::string& why);

// Whether x ranks before y among the partitions' picks (runnable ones first).
bool ranks_before(const PlanRequest& r, const Candidate& x, const Candidate& y);

}  // namespace aiscale::plan
