#include "aiscale/sweep/asha.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "aiscale/core/error.h"

namespace aiscale::sweep {

std::vector<int64_t> asha_rungs(int64_t min_budget, int64_t max_budget, int64_t eta) {
  if (min_budget < 1 || eta < 2) fail("internal: ASHA needs min_budget >= 1 and eta >= 2");
  std::vector<int64_t> out;
  for (int64_t r = min_budget; r < max_budget; r *= eta) {
    out.push_back(r);
    if (r > max_budget / eta) break;  // the next would pass the end (and could overflow)
  }
  return out;
}

Asha::Asha(int64_t eta, std::vector<int64_t> rungs) : eta_(eta), rungs_(std::move(rungs)) {}

bool Asha::is_rung(int64_t step) const {
  return std::find(rungs_.begin(), rungs_.end(), step) != rungs_.end();
}

std::vector<std::pair<double, int64_t>> Asha::recorded(int64_t step) const {
  std::vector<std::pair<double, int64_t>> out;
  const auto it = by_rung_.find(step);
  if (it == by_rung_.end()) return out;
  for (const auto& [trial, e] : it->second) out.emplace_back(e.loss, trial);
  // Best first; NaN last; equal losses by trial number.
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    const bool an = std::isnan(a.first), bn = std::isnan(b.first);
    if (an != bn) return bn;
    if (!an && a.first != b.first) return a.first < b.first;
    return a.second < b.second;
  });
  return out;
}

bool Asha::record(int64_t trial, int64_t step, double loss, bool exempt) {
  auto& rung = by_rung_[step];
  if (const auto it = rung.find(trial); it != rung.end()) return it->second.went_on;
  rung[trial] = {loss, true};
  bool go_on = exempt;
  if (!exempt && !std::isnan(loss)) {
    const auto order = recorded(step);
    const int64_t keep = std::max<int64_t>(1, static_cast<int64_t>(order.size()) / eta_);
    for (int64_t i = 0; i < keep && i < static_cast<int64_t>(order.size()); ++i)
      if (order[static_cast<size_t>(i)].second == trial) go_on = true;
  }
  rung[trial].went_on = go_on;
  return go_on;
}

void Asha::restore(int64_t trial, int64_t step, double loss, bool went_on) {
  by_rung_[step][trial] = {loss, went_on};
}

}  // namespace aiscale::sweep
