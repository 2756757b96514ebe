// `aiscale bench allreduce` and parallel.grad_reduce on 2 MPI ranks (aiscale launch).
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

#include <nlohmann/json.hpp>

#include "../support/run_support.h"

using namespace aiscale;
using namespace aiscale::testsupport;

namespace {

std::vector<nlohmann::json> json_lines(const std::string& output) {
  std::vector<nlohmann::json> out;
  std::istringstream in(output);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty() && line.front() == '{') out.push_back(nlohmann::json::parse(line));
  return out;
}

}  // namespace

TEST(BenchAllreduce, MpiTwoRanksOneLinePerSize) {
  auto r = run_aiscale("launch -n 2 --threads-per-rank 1 -- bench allreduce --backend mpi "
                       "--max-bytes 1048576 --iters 5 --warmup 1 --nodes 1 --system ci");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto rows = json_lines(r.output);
  ASSERT_EQ(rows.size(), 18u) << r.output;  // 8 B .. 1 MiB, doubling: printed by rank 0 only
  int64_t expect_bytes = 8;
  for (const auto& j : rows) {
    EXPECT_EQ(j["benchmark"], "allreduce");
    EXPECT_EQ(j["backend"], "mpi");
    EXPECT_EQ(j["world_size"], 2);
    EXPECT_EQ(j["bytes"], expect_bytes);
    EXPECT_EQ(j["correct"], true) << j.dump();
    EXPECT_EQ(j["system"], "ci");
    EXPECT_EQ(j["nodes"], 1);
    double t = j["time_s"], algbw = j["algbw_GBps"], busbw = j["busbw_GBps"];
    EXPECT_GT(t, 0);
    EXPECT_NEAR(algbw, expect_bytes / t / 1e9, 1e-9 * algbw);
    EXPECT_NEAR(busbw, algbw, 1e-12 * algbw);  // 2(n-1)/n = 1 for n = 2
    for (const char* k : {"device", "host", "date"}) EXPECT_TRUE(j.contains(k)) << k;
    expect_bytes *= 2;
  }
}

// grad_reduce = "sum" gives world x the averaged gradient (its norm is twice as large on
// 2 ranks); AdamW's normalised step makes the training the same up to epsilon when
// clipping is off.
TEST(GradReduce, SumIsWorldTimesAverage) {
  auto dir = temp_dir("gradreduce");
  write_byte_shards(dir);
  const std::string cfg = tiny_config(dir);
  const std::string common = " --set train.steps=6 train.grad_clip=0 train.eval_batches=1";
  auto avg = run_aiscale("launch -n 2 --threads-per-rank 1 -- train -q -c " + cfg + common +
                         " run.name=avg");
  ASSERT_EQ(avg.exit_code, 0) << avg.output;
  auto sum = run_aiscale("launch -n 2 --threads-per-rank 1 -- train -q -c " + cfg + common +
                         " run.name=sum parallel.grad_reduce=sum");
  ASSERT_EQ(sum.exit_code, 0) << sum.output;
  auto a = read_metrics(dir / "runs/avg"), s = read_metrics(dir / "runs/sum");
  ASSERT_EQ(a.size(), 6u);
  ASSERT_EQ(s.size(), 6u);
  // Step 1 reduces the same gradients: exactly twice the norm.
  EXPECT_NEAR(double(s[0]["grad_norm"]), 2.0 * double(a[0]["grad_norm"]), 1e-9 * double(s[0]["grad_norm"]));
  for (size_t i = 0; i < a.size(); ++i) {
    double la = a[i]["loss"], ls = s[i]["loss"];
    EXPECT_NEAR(la, ls, 1e-4 * std::abs(la)) << "step " << i + 1;
  }
}
