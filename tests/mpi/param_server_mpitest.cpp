// Asynchronous training with parameter servers on CPU ranks: 1 server + 2 workers train a
// small GPT to the loss of synchronous data parallelism on 2 ranks within a stated
// margin, measure the staleness of every update, hold a staleness bound, write a final
// checkpoint in the usual format, and refuse a job with no rank left to work.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../support/run_support.h"

using namespace aiscale::testsupport;

namespace {

struct TrainedRun {
  int exit_code = -1;
  std::string output;
  std::vector<nlohmann::json> metrics;
  nlohmann::json summary;
};

TrainedRun train(const fs::path& dir, int ranks, const std::string& name, const std::string& options,
                 int steps, const std::string& env = "") {
  TrainedRun out;
  auto r = run_aiscale("launch -n " + std::to_string(ranks) + " --threads-per-rank 1 -- train -q -c " +
                           (dir / "tiny.toml").string() + " " + options + " --set train.steps=" +
                           std::to_string(steps) + " run.name=" + name, env);
  out.exit_code = r.exit_code;
  out.output = r.output;
  if (r.exit_code != 0) return out;
  out.metrics = read_metrics(dir / "runs" / name);
  std::ifstream in(dir / "runs" / name / "summary.json");
  if (in) out.summary = nlohmann::json::parse(in);
  return out;
}

// The mean loss of the last `k` steps: over every line of those steps (one per worker in a
// parameter-server run, one per step in a synchronous run).
double tail_loss(const TrainedRun& r, int steps, int k) {
  double sum = 0;
  int n = 0;
  for (const auto& m : r.metrics)
    if (int(m["step"]) > steps - k) sum += double(m["loss"]), ++n;
  return n > 0 ? sum / n : 1e9;
}

}  // namespace

// Margin: the validation loss of the final weights (the same validation batches in both
// runs) within 10% of the synchronous run's, after the same tokens (2 workers x 30 steps x
// 4 x 32). The parameter-server run makes twice the updates with half the batch each, so
// it takes the learning rate divided by the workers (docs/guide/communication.md says
// why). Its result depends on the order in which the updates happen to land; measured on
// this data over 6 runs: synchronous 2.033, parameter servers 1.988 to 2.149 (-2% to
// +6%); at the synchronous run's learning rate it lags by 9-11%.
TEST(ParamServerMpi, ReachesTheSynchronousLossAndReportsStaleness) {
  auto dir = temp_dir("ps_train");
  write_byte_shards(dir);
  tiny_config(dir);  // train.lr = 3e-3
  const int steps = 30;
  TrainedRun sync = train(dir, 2, "sync", "", steps);
  ASSERT_EQ(sync.exit_code, 0) << sync.output;
  TrainedRun ps = train(dir, 3, "ps", "--parameter-servers 1 --set train.lr=1.5e-3", steps);
  ASSERT_EQ(ps.exit_code, 0) << ps.output;
  ASSERT_EQ(ps.metrics.size(), size_t(2 * steps));  // one line per worker step
  const double sync_val = sync.summary["val_loss"], ps_val = ps.summary["val_loss"];
  EXPECT_LT(ps_val, sync_val * 1.10) << "sync " << sync_val << ", parameter servers " << ps_val;
  const double ps_loss = tail_loss(ps, steps, 5);
  EXPECT_LT(ps_loss, double(ps.metrics[0]["loss"]) - 1.0);  // it trained

  const auto& comm = ps.summary["communication"];
  EXPECT_EQ(comm["mode"], "parameter_server");
  EXPECT_EQ(comm["parameter_servers"], 1);
  EXPECT_EQ(comm["workers"], 2);
  EXPECT_EQ(comm["updates"], 2 * steps);  // unbounded: every gradient applied
  EXPECT_EQ(comm["discarded_gradients"], 0);
  // Two workers computing side by side: the other's update usually lands in between.
  EXPECT_GT(double(comm["staleness_mean"]), 0.0);
  EXPECT_GE(int(comm["staleness_max"]), 1);
  int workers_seen[2] = {0, 0};
  for (const auto& m : ps.metrics) {
    ASSERT_TRUE(m.contains("staleness")) << m.dump();
    EXPECT_GE(int(m["staleness"]), 0);
    workers_seen[int(m["worker"])]++;
  }
  EXPECT_EQ(workers_seen[0], steps);
  EXPECT_EQ(workers_seen[1], steps);
  EXPECT_EQ(ps.summary["layout"]["parameter_servers"], 1);
  EXPECT_EQ(ps.summary["world_size"], 3);
  EXPECT_TRUE(ps.summary.contains("val_loss"));
  // The final checkpoint, gathered from the server, in the usual format: a synchronous run
  // on the workers' 2 ranks continues from it.
  EXPECT_TRUE(fs::exists(dir / "runs" / "ps" / "checkpoints" / "step_00000030" / "COMPLETE"));
  std::ifstream cfg(dir / "runs" / "ps" / "config.toml");
  std::string toml((std::istreambuf_iterator<char>(cfg)), {});
  EXPECT_NE(toml.find("parameter_servers = 1"), std::string::npos);
  auto resumed = run_aiscale("launch -n 2 --threads-per-rank 1 -- train -q --resume " +
                             (dir / "runs" / "ps").string() +
                             " --set train.steps=32 parallel.parameter_servers=0");
  EXPECT_EQ(resumed.exit_code, 0) << resumed.output;
  auto after = read_metrics(dir / "runs" / "ps");
  ASSERT_FALSE(after.empty());
  EXPECT_EQ(int(after.back()["step"]), 32);
  EXPECT_LT(double(after.back()["loss"]), ps_loss * 1.2);  // the trained weights, not fresh ones
}

// A straggler (worker 1 waits 40 ms before each backward pass) lets worker 0 run ahead:
// unbounded, its gradients land many versions late; with parallel.max_staleness = 1 no
// applied gradient is staler than 1, the staler ones are discarded, and training goes on.
TEST(ParamServerMpi, TheStalenessBoundHolds) {
  auto dir = temp_dir("ps_bound");
  write_byte_shards(dir);
  tiny_config(dir);
  const int steps = 16;
  const std::string slow = "AISCALE_FAULT=slow@1:40";
  TrainedRun free = train(dir, 3, "free", "--parameter-servers 1", steps, slow);
  ASSERT_EQ(free.exit_code, 0) << free.output;
  EXPECT_GT(int(free.summary["communication"]["staleness_max"]), 1);
  TrainedRun bounded = train(dir, 3, "bounded", "--parameter-servers 1 --max-staleness 1", steps, slow);
  ASSERT_EQ(bounded.exit_code, 0) << bounded.output;
  const auto& comm = bounded.summary["communication"];
  EXPECT_EQ(comm["max_staleness"], 1);
  EXPECT_LE(int(comm["staleness_max"]), 1);
  EXPECT_GT(int(comm["discarded_gradients"]), 0);
  EXPECT_EQ(int(comm["updates"]) + int(comm["discarded_gradients"]), 2 * steps);
  for (const auto& m : bounded.metrics)
    if (m["applied"] == true) {
      EXPECT_LE(int(m["staleness"]), 1) << m.dump();
    }
  EXPECT_LT(tail_loss(bounded, steps, 3), double(bounded.metrics[0]["loss"]) - 0.5);
}

TEST(ParamServerMpi, NoWorkerLeftIsRefusedBeforeAnythingIsWritten) {
  auto dir = temp_dir("ps_bad");
  write_byte_shards(dir);
  tiny_config(dir);
  TrainedRun r = train(dir, 2, "none", "--parameter-servers 2", 4);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("parallel.parameter_servers = 2 leaves no worker among the job's 2 rank(s)"),
            std::string::npos) << r.output;
  EXPECT_NE(r.output.find("aiscale launch -n 3"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir / "runs" / "none"));
}
