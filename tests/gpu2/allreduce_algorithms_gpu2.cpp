// The hand-written GPU all-reduce algorithms (parallel/nccl/device_algorithms.h) through
// `aiscale bench allreduce --backend nccl --algorithm ring|hierarchical`: every size is
// checked by the benchmark against the exact sum (an exit code of 0 means every size was
// right). Odd value counts (12 bytes * 3^k: 1, 3, 9, ... 4,782,969 values), counts below
// the rank count, and segments of several 4 MiB chunks. And data-parallel training with
// each algorithm against 1 GPU.
#include "gpu2_support.h"

using namespace aiscale;
using namespace aiscale::testsupport;

namespace {

constexpr int kSizes = 15;  // 12 B * 3^k up to 60 MB
const char* kSweep = "--min-bytes 12 --max-bytes 60000000 --step-factor 3 --iters 3 --warmup 1 --repeats 1";

// Runs the benchmark on `ranks` GPUs and checks its records.
void expect_bench_sums(int ranks, const std::string& algorithm_args, const std::string& algorithm) {
  auto dir = temp_dir("gpu2-allreduce-" + algorithm);
  const fs::path out = dir / "ar.jsonl";
  auto r = run_aiscale("launch -n " + std::to_string(ranks) + " --threads-per-rank 2 -- bench allreduce "
                       "--backend nccl " + algorithm_args + " " + kSweep + " --output " + out.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream in(out);
  std::string line;
  int rows = 0;
  while (std::getline(in, line)) {
    const nlohmann::json j = nlohmann::json::parse(line);
    EXPECT_EQ(j["algorithm"], algorithm) << line;
    EXPECT_EQ(j["backend"], "nccl") << line;
    EXPECT_EQ(int(j["world_size"]), ranks) << line;
    EXPECT_EQ(j["correct"], true) << line;
    EXPECT_GT(double(j["busbw_GBps"]), 0.0) << line;
    EXPECT_EQ(int64_t(j["count"]) % 2, 1) << line;  // odd value counts only
    ++rows;
    if (int64_t(j["bytes"]) >= (int64_t{1} << 20))
      std::printf("[allreduce gpu] %d GPUs, %s, %lld B: busbw %.1f GB/s\n", ranks, algorithm_args.c_str(),
                  static_cast<long long>(j["bytes"]), double(j["busbw_GBps"]));
  }
  EXPECT_EQ(rows, kSizes) << r.output;
}

}  // namespace

TEST(AllreduceGpu, RingSumsOddSizes) { expect_bench_sums(2, "--algorithm ring", "ring"); }

TEST(AllreduceGpu, HierarchicalOneRankPerNode) {
  expect_bench_sums(2, "--algorithm hierarchical --ranks-per-node 1", "hierarchical");
}

TEST(AllreduceGpu, HierarchicalOneNodeOfTwo) {
  expect_bench_sums(2, "--algorithm hierarchical --ranks-per-node 2", "hierarchical");
}

TEST(AllreduceGpu, FourGpusRingAndNodes) {
  gpu2::need_gpus(4);
  expect_bench_sums(4, "--algorithm ring", "ring");
  expect_bench_sums(4, "--algorithm hierarchical --ranks-per-node 2", "hierarchical");
  expect_bench_sums(4, "--algorithm hierarchical --ranks-per-node 3", "hierarchical");  // 3 + 1
}

// Training: the gradient buckets summed by the hand-written algorithms train like 1 GPU
// with the whole batch (the tolerances of the NCCL library run, gpu2_support.h).
TEST(AllreduceGpu, DdpWithTheRingMatchesOneGpu) {
  gpu2::expect_like_one_gpu("parallel.allreduce=ring parallel.bucket_mib=0.3", "ring all-reduce");
}

TEST(AllreduceGpu, DdpWithTheHierarchicalAllreduceMatchesOneGpu) {
  gpu2::expect_like_one_gpu("parallel.allreduce=hierarchical parallel.ranks_per_node=1", "hierarchical all-reduce");
}

int main(int argc, char** argv) {
  return aiscale::testsupport::gpu2::run_multi_gpu_tests(
      argc, argv, "the hand-written GPU all-reduces run over NCCL only");
}
