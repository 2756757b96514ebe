// The op tables of every rank side by side: per op, the smallest and the largest total over
// the ranks and which ranks they are, so that a straggler (a rank whose data loading, a
// kernel or a collective takes longer) shows at a glance. A rank where an op has no row
// counts as 0 for it.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "aiscale/profile/op_table.h"

namespace aiscale::profile {

struct RankSpreadRow {
  std::string name, kind, where;
  bool overlapped = false;
  int ranks_with = 0;  // ranks that have the row
  double min_total_s = 0, max_total_s = 0;
  int min_rank = 0, max_rank = 0;
  // max / min - 1 (0: the ranks agree; a large value: one rank spends longer).
  double spread() const { return min_total_s > 0 ? max_total_s / min_total_s - 1 : 0; }
};

struct RankSpread {
  int ranks = 0;
  int64_t steps = 0;  // profiled steps (rank 0's; every rank profiles as many)
  // The profiled steps' time summed, as each table's step_time_s.
  double min_step_time_s = 0, max_step_time_s = 0;
  int min_step_rank = 0, max_step_rank = 0;
  std::vector<RankSpreadRow> rows;  // by the largest total, largest first
};

// `tables` in rank order (at least one).
RankSpread rank_spread(const std::vector<OpTable>& tables);
nlohmann::json rank_spread_json(const RankSpread& s);
std::string rank_spread_markdown(const RankSpread& s);

}  // namespace aiscale::profile
