// environment.json and the --profile trace of a 2-rank run: every rank's host and its own
// process in the trace.
#include <gtest/gtest.h>

#include "../profile/trace_check.h"
#include "../support/run_support.h"

using namespace aiscale;
using namespace aiscale::testsupport;

TEST(ObservabilityMpi, TwoRanksRecordTheirHostsAndTraces) {
  const fs::path dir = temp_dir("observability-mpi");
  write_byte_shards(dir);
  const std::string config = tiny_config(dir);
  auto r = run_aiscale("launch -n 2 --threads-per-rank 1 -- train -q -c " + config +
                       " --profile 2 --set train.steps=4 train.warmup_steps=1 run.name=two");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto env = nlohmann::json::parse(read_bytes(dir / "runs/two/environment.json"));
  EXPECT_EQ(env["world_size"], 2);
  EXPECT_EQ(env["communicator"], "mpi");
  ASSERT_EQ(env["ranks"].size(), 2u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(env["ranks"][i]["rank"], i);
    EXPECT_FALSE(env["ranks"][i]["host"].get<std::string>().empty());
  }
  EXPECT_NE(env["ranks"][0]["pid"], env["ranks"][1]["pid"]);
  EXPECT_FALSE(env["libraries"]["mpi"].get<std::string>().empty());

  const auto trace = nlohmann::json::parse(read_bytes(dir / "runs/two/profile/trace.json"));
  EXPECT_EQ(check_trace(trace), "");
  std::set<int> pids, comm_pids;
  for (const auto& e : trace["traceEvents"]) {
    pids.insert(e["pid"].get<int>());
    if (e["ph"] == "X" && e["cat"] == "comm") comm_pids.insert(e["pid"].get<int>());
  }
  EXPECT_EQ(pids, (std::set<int>{0, 1}));
  EXPECT_EQ(comm_pids, (std::set<int>{0, 1}));  // the gradient all-reduce of each rank
}
