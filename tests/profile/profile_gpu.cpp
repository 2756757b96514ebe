// `aiscale train --profile 3` on the CUDA model (label gpu): the trace holds the ops of the
// model's GPU stream (CUDA events), the op table has GPU rows, environment.json names the
// GPU. Exit code 77 (skipped) where no GPU is visible.
// Not named *_test.cpp: the unit-test glob leaves it alone (tests/profile/CMakeLists.txt).
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include "../support/run_support.h"
#include "trace_check.h"

using namespace aiscale;
using namespace aiscale::testsupport;

namespace {

TEST(ProfileGpu, TraceHasTheModelStreamsOps) {
  const fs::path dir = temp_dir("profile-gpu");
  write_byte_shards(dir);
  std::ofstream(dir / "gpu.toml")
      << "[model]\npreset = \"gpt-tiny\"\nn_layer = 2\nn_head = 2\nn_embd = 128\nblock_size = 64\n"
         "vocab_size = 256\n[data]\ntrain = \"" << (dir / "tiny_train_*.bin").string()
      << "\"\ntokenizer = \"byte\"\n[train]\ndevice = \"cuda\"\nprecision = \"bf16\"\n"
         "batch_size = 8\nseq_len = 64\nsteps = 5\nwarmup_steps = 1\n[run]\ndir = \""
      << (dir / "runs").string() << "\"\n";
  auto r = run_aiscale("train -q -c " + (dir / "gpu.toml").string() +
                       " --profile 3 --tensorboard --set run.name=gpu");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const fs::path run = dir / "runs/gpu";
  const auto trace = nlohmann::json::parse(read_bytes(run / "profile/trace.json"));
  EXPECT_EQ(check_trace(trace), "");
  int gpu_ops = 0, gpu_matmuls = 0;
  bool named_stream = false;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name" && e["tid"].get<int>() >= 16)
      named_stream = e["args"]["name"] == "GPU: model stream";
    if (e["ph"] != "X" || e["tid"].get<int>() < 16) continue;
    ++gpu_ops;
    EXPECT_GE(e["dur"].get<double>(), 0);
    if (e["name"] == "matmul_forward") ++gpu_matmuls;
  }
  EXPECT_TRUE(named_stream);
  EXPECT_GT(gpu_ops, 0);
  EXPECT_EQ(gpu_matmuls, 3 * (4 * 2 + 1));  // 4 per layer + the logits, 3 steps
  const auto table = nlohmann::json::parse(read_bytes(run / "profile/op_table.json"));
  bool gpu_row = false;
  for (const auto& row : table["rows"])
    if (row["where"] == "gpu" && row["op"] == "matmul_backward") gpu_row = row["achieved_tflops"].get<double>() > 0;
  EXPECT_TRUE(gpu_row) << table.dump(2);
  // The GPU time of the stream is some part of the step (not more than the step plus
  // the host rows that overlap it).
  EXPECT_GT(table["coverage"].get<double>(), 0.05) << table.dump(2);
  const auto env = nlohmann::json::parse(read_bytes(run / "environment.json"));
  EXPECT_FALSE(env["ranks"][0]["gpu_name"].get<std::string>().empty());
  EXPECT_EQ(env["ranks"][0]["gpu_uuid"].get<std::string>().rfind("GPU-", 0), 0u) << env.dump(2);
  EXPECT_FALSE(env["libraries"]["cuda_runtime"].get<std::string>().empty());
  EXPECT_FALSE(env["libraries"]["nvidia_driver"].get<std::string>().empty());
}

}  // namespace

int main(int argc, char** argv) {
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess) gpus = 0;
  if (gpus < 1) {
    std::printf("skipped: no GPU visible\n");
    return 77;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
