// Training a small GPT on 2 MPI ranks with each communication choice: the ring and
// hierarchical all-reduce give the library's losses bit for bit (on two ranks every sum
// is one addition, whatever the order); top-k and int8 compression with error feedback
// reach the uncompressed run's loss within a stated margin; AdaSum trains; the choices
// and the bytes on the wire are in summary.json and the metrics lines.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "../support/run_support.h"

using namespace aiscale::testsupport;

namespace {

struct TrainedRun {
  std::vector<nlohmann::json> metrics;
  nlohmann::json summary;
};

TrainedRun train(const fs::path& dir, const std::string& cfg, const std::string& name, const std::string& options,
          int steps) {
  auto r = run_aiscale("launch -n 2 --threads-per-rank 1 -- train -q -c " + cfg + " " + options +
                       " --set train.steps=" + std::to_string(steps) + " run.name=" + name);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  TrainedRun out;
  out.metrics = read_metrics(dir / "runs" / name);
  std::ifstream in(dir / "runs" / name / "summary.json");
  if (in) out.summary = nlohmann::json::parse(in);
  return out;
}

// The mean loss of the last `k` steps (one step's loss is one batch's: noisy).
double tail_loss(const TrainedRun& r, size_t k) {
  double s = 0;
  for (size_t i = r.metrics.size() - k; i < r.metrics.size(); ++i) s += double(r.metrics[i]["loss"]);
  return s / double(k);
}

}  // namespace

TEST(CommunicationMpi, RingAndHierarchicalTrainLikeTheLibrary) {
  auto dir = temp_dir("comm_algos");
  write_byte_shards(dir);
  const std::string cfg = tiny_config(dir);
  TrainedRun lib = train(dir, cfg, "library", "", 6);
  TrainedRun ring = train(dir, cfg, "ring", "--allreduce ring", 6);
  TrainedRun hier = train(dir, cfg, "hier", "--allreduce hierarchical --ranks-per-node 1", 6);
  ASSERT_EQ(lib.metrics.size(), 6u);
  for (const TrainedRun* r : {&ring, &hier}) {
    ASSERT_EQ(r->metrics.size(), 6u);
    for (size_t i = 0; i < 6; ++i) {
      EXPECT_EQ(double(r->metrics[i]["loss"]), double(lib.metrics[i]["loss"])) << "step " << i + 1;
      EXPECT_EQ(double(r->metrics[i]["grad_norm"]), double(lib.metrics[i]["grad_norm"])) << "step " << i + 1;
    }
  }
  EXPECT_EQ(lib.summary["communication"]["allreduce"], "library");
  EXPECT_EQ(ring.summary["communication"]["allreduce"], "ring");
  EXPECT_EQ(hier.summary["communication"]["allreduce"], "hierarchical");
  EXPECT_EQ(ring.summary["communication"]["grad_mixing"], "average");
  const int64_t dense = lib.summary["communication"]["grad_dense_bytes"];
  EXPECT_EQ(dense, 4 * int64_t(lib.summary["n_params"]));
  EXPECT_EQ(lib.summary["communication"]["grad_wire_bytes_per_step"], dense);  // 2(p-1)/p = 1 on 2 ranks
}

// Margins on the mean loss of the last 5 of 30 steps against the uncompressed run's
// (measured on this data: none 2.099): int8 within 3% (measured +0.8%), top-k at ratio
// 0.5 within 5% (+1.3%); top-k at 0.1 lags under AdamW (+18%; docs/guide/communication.md
// says why) and is held to 25%, which a top-k that lost its residuals would not reach.
TEST(CommunicationMpi, CompressionWithErrorFeedbackReachesTheUncompressedLoss) {
  auto dir = temp_dir("comm_compress");
  write_byte_shards(dir);
  const std::string cfg = tiny_config(dir);
  const int steps = 30;
  TrainedRun none = train(dir, cfg, "none", "", steps);
  TrainedRun topk = train(dir, cfg, "topk", "--compression topk --topk-ratio 0.5", steps);
  TrainedRun sparse = train(dir, cfg, "sparse", "--compression topk --topk-ratio 0.1", steps);
  TrainedRun int8 = train(dir, cfg, "int8", "--compression int8", steps);
  for (const TrainedRun* r : {&none, &topk, &sparse, &int8}) ASSERT_EQ(r->metrics.size(), size_t(steps));
  const double base = tail_loss(none, 5);
  std::printf("mean loss of steps 26-30: none %.4f, top-k 0.5 %.4f, top-k 0.1 %.4f, int8 %.4f\n",
              base, tail_loss(topk, 5), tail_loss(sparse, 5), tail_loss(int8, 5));
  EXPECT_LT(base, double(none.metrics[0]["loss"]) - 0.5) << "the uncompressed run did not learn";
  EXPECT_NEAR(tail_loss(topk, 5), base, 0.05 * base);
  EXPECT_NEAR(tail_loss(int8, 5), base, 0.03 * base);
  EXPECT_NEAR(tail_loss(sparse, 5), base, 0.25 * base);
  // The bytes on the wire, in the summary and on every metrics line.
  const auto& t = topk.summary["communication"];
  EXPECT_EQ(t["compression"], "topk");
  EXPECT_EQ(t["topk_ratio"], 0.5);
  const int64_t n = topk.summary["n_params"];
  EXPECT_EQ(t["grad_payload_bytes"], 8 * int64_t(std::ceil(0.5 * double(n))));
  EXPECT_EQ(topk.metrics[0]["grad_wire_bytes"], t["grad_wire_bytes_per_step"]);
  EXPECT_EQ(int8.summary["communication"]["grad_payload_bytes"], n + 4 * ((n + 4095) / 4096));
  EXPECT_FALSE(none.metrics[0].contains("grad_wire_bytes"));
}

TEST(CommunicationMpi, AdaSumTrainsAndIsRecorded) {
  auto dir = temp_dir("comm_adasum");
  write_byte_shards(dir);
  const std::string cfg = tiny_config(dir);
  TrainedRun ada = train(dir, cfg, "adasum", "--grad-mixing adasum", 20);
  ASSERT_EQ(ada.metrics.size(), 20u);
  EXPECT_LT(tail_loss(ada, 5), double(ada.metrics[0]["loss"]) - 0.5);
  EXPECT_EQ(ada.summary["communication"]["grad_mixing"], "adasum");
  EXPECT_EQ(ada.summary["communication"]["grad_wire_bytes_per_step"], 4 * int64_t(ada.summary["n_params"]));
}

TEST(CommunicationMpi, AdaSumRefusesThreeRanksBeforeAnythingStarts) {
  auto dir = temp_dir("comm_adasum3");
  write_byte_shards(dir);
  const std::string cfg = tiny_config(dir);
  auto r = run_aiscale("launch -n 3 --threads-per-rank 1 -- train -q -c " + cfg +
                       " --grad-mixing adasum --set run.name=three");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("power-of-two number of data-parallel ranks, not 3"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir / "runs" / "three"));
}
