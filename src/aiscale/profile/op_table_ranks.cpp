#include "aiscale/profile/op_table_ranks.h"

#include <algorithm>
#include <map>
#include <tuple>

#include <fmt/format.h>

namespace aiscale::profile {

RankSpread rank_spread(const std::vector<OpTable>& tables) {
  RankSpread s;
  s.ranks = static_cast<int>(tables.size());
  s.steps = tables.empty() ? 0 : tables.front().steps;
  // Per row key, the total on each rank (0 where it has no row).
  using Key = std::tuple<std::string, std::string, std::string, bool>;
  std::map<Key, std::vector<double>> totals;
  std::map<Key, int> present;
  for (size_t i = 0; i < tables.size(); ++i) {
    const OpTable& t = tables[i];
    if (i == 0 || t.step_time_s < s.min_step_time_s) {
      s.min_step_time_s = t.step_time_s;
      s.min_step_rank = t.rank;
    }
    if (i == 0 || t.step_time_s > s.max_step_time_s) {
      s.max_step_time_s = t.step_time_s;
      s.max_step_rank = t.rank;
    }
    for (const OpRow& r : t.rows) {
      const Key key{r.kind, r.name, r.where, r.overlapped};
      auto& v = totals[key];
      v.resize(tables.size(), 0.0);
      v[i] += r.total_s;
      ++present[key];
    }
  }
  for (auto& [key, v] : totals) {
    RankSpreadRow row;
    std::tie(row.kind, row.name, row.where, row.overlapped) = key;
    row.ranks_with = present[key];
    const auto lo = std::min_element(v.begin(), v.end());
    const auto hi = std::max_element(v.begin(), v.end());
    row.min_total_s = *lo;
    row.max_total_s = *hi;
    row.min_rank = tables[size_t(lo - v.begin())].rank;
    row.max_rank = tables[size_t(hi - v.begin())].rank;
    s.rows.push_back(std::move(row));
  }
  std::stable_sort(s.rows.begin(), s.rows.end(), [](const RankSpreadRow& a, const RankSpreadRow& b) {
    return a.max_total_s > b.max_total_s;
  });
  return s;
}

nlohmann::json rank_spread_json(const RankSpread& s) {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& r : s.rows)
    rows.push_back({{"op", r.name},
                    {"kind", r.kind},
                    {"where", r.where},
                    {"overlapped", r.overlapped},
                    {"ranks_with_op", r.ranks_with},
                    {"min_total_s", r.min_total_s},
                    {"min_rank", r.min_rank},
                    {"max_total_s", r.max_total_s},
                    {"max_rank", r.max_rank},
                    {"spread", r.spread()}});
  return {{"ranks", s.ranks},
          {"profiled_steps", s.steps},
          {"step_time_s", {{"min", s.min_step_time_s},
                           {"min_rank", s.min_step_rank},
                           {"max", s.max_step_time_s},
                           {"max_rank", s.max_step_rank}}},
          {"rows", rows}};
}

std::string rank_spread_markdown(const RankSpread& s) {
  const double per_step = s.steps > 0 ? 1e3 / double(s.steps) : 0.0;
  std::string out = fmt::format(
      "Across {} rank(s): {:.3f} ms per profiled step on rank {} to {:.3f} ms on rank {}.\n\n",
      s.ranks, per_step * s.min_step_time_s, s.min_step_rank, per_step * s.max_step_time_s,
      s.max_step_rank);
  out += "| op | kind | where | ranks | min total (ms) | on rank | max total (ms) | on rank | max/min |\n";
  out += "|---|---|---|---:|---:|---:|---:|---:|---:|\n";
  for (const auto& r : s.rows)
    out += fmt::format("| {}{} | {} | {} | {} | {:.3f} | {} | {:.3f} | {} | {} |\n", r.name,
                       r.overlapped ? " (overlapped)" : "", r.kind, r.where, r.ranks_with,
                       1e3 * r.min_total_s, r.min_rank, 1e3 * r.max_total_s, r.max_rank,
                       r.min_total_s > 0 ? fmt::format("{:.2f}x", r.max_total_s / r.min_total_s)
                                         : std::string("-"));
  return out;
}

}  // namespace aiscale::profile
