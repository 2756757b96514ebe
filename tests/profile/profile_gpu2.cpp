// `aiscale train --profile 2` on 2 GPUs over NCCL (label gpu): every rank's trace has the
// communicator stream's track with a span per gradient bucket and step (bucket index,
// bytes, element type, collective), the gathers of the tokens and of d(res0), and with
// ZeRO-1 and bf16 gradients the reduce-scatters, the casts and the weights' all-gather; the
// op table lists them apart as overlapped rows with their GB/s, on every rank.
// Exit code 77 (skipped) with fewer than 2 GPUs or without NCCL.
// Not named *_test.cpp: the unit-test glob leaves it alone (tests/profile/CMakeLists.txt).
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <set>

#include <cuda_runtime.h>

#include "aiscale/parallel/comm.h"
#include "../support/run_support.h"
#include "trace_check.h"

using namespace aiscale;
using namespace aiscale::testsupport;

namespace {

constexpr int kCommTrack = 32;  // profile::kGpuCommTrack

std::string gpu_config(const fs::path& dir) {
  write_byte_shards(dir);
  std::ofstream(dir / "gpu.toml")
      << "[model]\npreset = \"gpt-tiny\"\nn_layer = 2\nn_head = 2\nn_embd = 128\nblock_size = 64\n"
         "vocab_size = 256\n[data]\ntrain = \"" << (dir / "tiny_train_*.bin").string()
      << "\"\ntokenizer = \"byte\"\n[train]\ndevice = \"cuda\"\nprecision = \"bf16\"\n"
         "batch_size = 8\nseq_len = 64\nsteps = 4\nwarmup_steps = 1\n[run]\ndir = \""
      << (dir / "runs").string() << "\"\n";
  return (dir / "gpu.toml").string();
}

struct CommSpans {
  std::map<std::string, int> count;                   // by name, both ranks
  std::map<int, std::map<int, int>> buckets;          // rank -> bucket index -> spans
  std::set<int> named_ranks;                          // ranks whose track is named
};

CommSpans comm_spans(const nlohmann::json& trace, const std::string& bucket_op,
                     const std::string& dtype, const std::string& collective) {
  CommSpans c;
  for (const auto& e : trace["traceEvents"]) {
    if (e["tid"] != kCommTrack) continue;
    if (e["ph"] == "M" && e["name"] == "thread_name" &&
        e["args"]["name"] == "GPU: communicator stream")
      c.named_ranks.insert(e["pid"].get<int>());
    if (e["ph"] != "X") continue;
    EXPECT_EQ(e["cat"], "comm") << e.dump();
    EXPECT_GE(e["dur"].get<double>(), 0) << e.dump();
    ++c.count[e["name"].get<std::string>()];
    if (e["name"] != bucket_op) continue;
    const auto& a = e["args"];
    EXPECT_GT(a["bytes"].get<double>(), 0) << e.dump();
    EXPECT_EQ(a["dtype"], dtype) << e.dump();
    EXPECT_EQ(a["collective"], collective) << e.dump();
    ++c.buckets[e["pid"].get<int>()][a["bucket"].get<int>()];
  }
  return c;
}

// Each rank: every bucket once per profiled step (2), the buckets numbered 0..n-1 (n > 1).
void expect_every_bucket_twice(const CommSpans& c) {
  ASSERT_EQ(c.buckets.size(), 2u);
  for (const auto& [rank, per_bucket] : c.buckets) {
    EXPECT_GT(per_bucket.size(), 1u) << "rank " << rank;
    int expected = 0;
    for (const auto& [k, n] : per_bucket) {
      EXPECT_EQ(k, expected++) << "rank " << rank;
      EXPECT_EQ(n, 2) << "rank " << rank << " bucket " << k;
    }
  }
  EXPECT_EQ(c.named_ranks, (std::set<int>{0, 1}));
}

// Every rank's op table lists `op` as an overlapped GPU row with a rate, apart from the
// rows' total.
void expect_overlapped_row(const nlohmann::json& table, const std::string& op) {
  ASSERT_EQ(table["ranks"].size(), 2u);
  for (const auto& t : table["ranks"]) {
    bool found = false;
    for (const auto& row : t["rows"]) {
      if (row["op"] != op) continue;
      found = true;
      EXPECT_TRUE(row["overlapped"].get<bool>()) << row.dump();
      EXPECT_EQ(row["where"], "gpu");
      EXPECT_GT(row["achieved_gb_per_s"].get<double>(), 0) << row.dump();
    }
    EXPECT_TRUE(found) << op << " missing on rank " << t["rank"] << ": " << t.dump(2);
    EXPECT_GT(t["overlapped_total_s"].get<double>(), 0);
  }
}

RunOutput train_two(const std::string& cfg, const std::string& name, const std::string& set) {
  return run_aiscale("launch -n 2 --threads-per-rank 4 -- train -q -c " + cfg +
                     " --profile 2 --set run.name=" + name +
                     " parallel.communicator=nccl parallel.grad_transport=nccl parallel.bucket_mib=0.3 " + set);
}

TEST(ProfileGpu2, BucketsOnTheCommunicatorTrack) {
  const fs::path dir = temp_dir("profile-gpu2");
  const std::string cfg = gpu_config(dir);
  auto r = train_two(cfg, "ddp", "");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const fs::path prof = dir / "runs/ddp/profile";
  const auto trace = nlohmann::json::parse(read_bytes(prof / "trace.json"));
  EXPECT_EQ(check_trace(trace), "");
  const CommSpans c = comm_spans(trace, "allreduce_bucket", "fp32", "allreduce");
  expect_every_bucket_twice(c);
  EXPECT_EQ(c.count.at("allgather_inputs"), 4);       // 2 ranks x 2 steps
  EXPECT_EQ(c.count.at("allgather_input_grads"), 4);
  const auto table = nlohmann::json::parse(read_bytes(prof / "op_table.json"));
  expect_overlapped_row(table, "allreduce_bucket");
  EXPECT_EQ(table["across_ranks"]["ranks"], 2);
  EXPECT_NE(read_bytes(prof / "op_table.md").find("Overlapped:"), std::string::npos);
}

TEST(ProfileGpu2, ZeroOneWithBf16GradientsShowsEveryCollective) {
  const fs::path dir = temp_dir("profile-gpu2-zero");
  const std::string cfg = gpu_config(dir);
  auto r = train_two(cfg, "zero", "parallel.zero_stage=1 parallel.grad_comm=bf16");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const fs::path prof = dir / "runs/zero/profile";
  const auto trace = nlohmann::json::parse(read_bytes(prof / "trace.json"));
  EXPECT_EQ(check_trace(trace), "");
  const CommSpans c = comm_spans(trace, "reduce_scatter_bucket", "bf16", "reduce_scatter");
  expect_every_bucket_twice(c);
  const int buckets = static_cast<int>(c.buckets.at(0).size());
  EXPECT_EQ(c.count.at("bucket_to_bf16"), 2 * 2 * buckets);
  EXPECT_EQ(c.count.at("bucket_to_f32"), 2 * 2 * buckets);
  EXPECT_EQ(c.count.at("allgather_params"), 4);
  const auto table = nlohmann::json::parse(read_bytes(prof / "op_table.json"));
  expect_overlapped_row(table, "reduce_scatter_bucket");
  expect_overlapped_row(table, "allgather_params");
}

}  // namespace

int main(int argc, char** argv) {
  // Keep NVLink multicast (NVLS) off: on shared machines it can take GPUs out of service.
  setenv("NCCL_NVLS_ENABLE", "0", 0);
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess) gpus = 0;
  if (gpus < 2) {
    std::printf("skipped: %d GPU(s) visible, these tests need 2\n", gpus);
    return 77;
  }
  if (!aiscale::parallel::nccl_compiled()) {
    std::printf("skipped: aiscale was built without NCCL\n");
    return 77;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
