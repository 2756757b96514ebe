// The op tables of a 2-rank CPU run with --profile: op_table.json holds both ranks' tables
// and the spread of each op's total over the ranks, and the tables agree where they must
// (the same ops called as often on both ranks, each rank's rows accounting for its steps).
#include <gtest/gtest.h>

#include <set>

#include "../support/run_support.h"

using namespace aiscale;
using namespace aiscale::testsupport;

namespace {

const nlohmann::json* row_of(const nlohmann::json& rows, const std::string& op) {
  for (const auto& r : rows)
    if (r["op"] == op) return &r;
  return nullptr;
}

}  // namespace

TEST(ProfileRanksMpi, EveryRanksOpTableAndTheSpreadOverRanks) {
  const fs::path dir = temp_dir("profile-ranks-mpi");
  write_byte_shards(dir);
  const std::string config = tiny_config(dir);
  auto r = run_aiscale("launch -n 2 --threads-per-rank 1 -- train -q -c " + config +
                       " --profile 2 --set train.steps=4 train.warmup_steps=1 run.name=two");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const fs::path prof = dir / "runs/two/profile";
  const auto table = nlohmann::json::parse(read_bytes(prof / "op_table.json"));
  EXPECT_EQ(table["world_size"], 2);
  EXPECT_EQ(table["rank"], 0);  // the top level is rank 0's table
  ASSERT_EQ(table["ranks"].size(), 2u) << table.dump(2);
  for (int k = 0; k < 2; ++k) {
    const auto& t = table["ranks"][k];
    EXPECT_EQ(t["rank"], k);
    EXPECT_EQ(t["profiled_steps"], 2);
    EXPECT_NEAR(t["coverage"].get<double>(), 1.0, 0.05) << t.dump(2);
    for (const char* op : {"matmul_forward", "next_batch", "allreduce gradients"})
      EXPECT_NE(row_of(t["rows"], op), nullptr) << "rank " << k << " lacks " << op;
  }
  EXPECT_EQ(table["rows"], table["ranks"][0]["rows"]);
  // The same ops, called as often, on both ranks.
  std::set<std::string> ops0, ops1;
  for (const auto& row : table["ranks"][0]["rows"]) {
    ops0.insert(row["op"].get<std::string>());
    const auto* other = row_of(table["ranks"][1]["rows"], row["op"]);
    ASSERT_NE(other, nullptr) << row["op"];
    EXPECT_EQ((*other)["calls"], row["calls"]) << row["op"];
  }
  for (const auto& row : table["ranks"][1]["rows"]) ops1.insert(row["op"].get<std::string>());
  EXPECT_EQ(ops0, ops1);
  // The spread: per op, min and max of the ranks' totals, and which ranks they are.
  const auto& across = table["across_ranks"];
  EXPECT_EQ(across["ranks"], 2);
  EXPECT_EQ(across["rows"].size(), ops0.size());
  for (const auto& row : across["rows"]) {
    EXPECT_EQ(row["ranks_with_op"], 2) << row.dump();
    const double lo = row["min_total_s"], hi = row["max_total_s"];
    EXPECT_LE(lo, hi) << row.dump();
    const int lo_rank = row["min_rank"], hi_rank = row["max_rank"];
    ASSERT_TRUE(lo_rank >= 0 && lo_rank < 2 && hi_rank >= 0 && hi_rank < 2) << row.dump();
    const auto* at_lo = row_of(table["ranks"][lo_rank]["rows"], row["op"]);
    const auto* at_hi = row_of(table["ranks"][hi_rank]["rows"], row["op"]);
    ASSERT_TRUE(at_lo && at_hi) << row.dump();
    EXPECT_DOUBLE_EQ((*at_lo)["total_s"].get<double>(), lo);
    EXPECT_DOUBLE_EQ((*at_hi)["total_s"].get<double>(), hi);
  }
  const double s0 = table["ranks"][0]["step_time_s"], s1 = table["ranks"][1]["step_time_s"];
  EXPECT_DOUBLE_EQ(across["step_time_s"]["min"].get<double>(), std::min(s0, s1));
  EXPECT_DOUBLE_EQ(across["step_time_s"]["max"].get<double>(), std::max(s0, s1));
  const std::string md = read_bytes(prof / "op_table.md");
  EXPECT_NE(md.find("## Across ranks"), std::string::npos) << md;
  EXPECT_NE(md.find("## Rank 1"), std::string::npos) << md;
  EXPECT_NE(r.output.find("Across 2 rank(s)"), std::string::npos) << r.output;
}
