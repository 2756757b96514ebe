// Shared by the multi-GPU test programs: a small GPT config on byte-level text, the
// comparisons of two runs' losses and weights (also of runs resumed across layouts), "N GPUs
// train like 1 GPU with the whole batch", a refused layout, the skip of a test that needs
// more GPUs, and the programs' main().
//
// On a host with one GPU, AISCALE_TEST_SHARED_GPU=1 runs the 2-rank tests as 2 ranks sharing
// that GPU over MPI (parallel.communicator = "mpi": device collectives staged through host
// memory; run_support.h's run_aiscale rewrites the commands that launch several ranks). The
// tests about NCCL or the copy engines themselves skip there (skip_on_shared_gpu), so do
// the 4-rank ones. With 2 or more GPUs visible the variable changes nothing.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <cuda_runtime.h>
#include <nlohmann/json.hpp>

#include "aiscale/parallel/bootstrap.h"
#include "aiscale/parallel/comm.h"
#include "aiscale/train/checkpoint.h"
#include "aiscale/train/safetensors.h"
#include "../support/run_support.h"

namespace aiscale::testsupport::gpu2 {

// Whether this program's ranks share one GPU over MPI (AISCALE_TEST_SHARED_GPU=1, one GPU).
inline bool shared_gpu() { return shared_gpu_ranks(); }

// The communicator a run of several ranks names in its start line ("2 rank(s) [nccl]").
inline std::string ranks_backend() { return shared_gpu() ? "mpi+host-staging" : "nccl"; }

// For a test about what 2 ranks sharing one GPU over MPI cannot show (NCCL itself, the
// copy engines, one GPU per rank): exit code 77 (CTest: skipped) there, saying why.
inline void skip_on_shared_gpu(const std::string& why) {
  if (!shared_gpu()) return;
  std::printf("skipped: 2 ranks share one GPU over MPI here (AISCALE_TEST_SHARED_GPU=1): %s\n",
              why.c_str());
  std::fflush(stdout);
  std::exit(77);
}

// A small GPT (head size 64, as the flash kernels like) on byte-level text, bf16.
inline std::string gpu_config(const fs::path& dir, int64_t steps) {
  std::string cfg =
      "[model]\npreset = \"gpt-tiny\"\nn_layer = 2\nn_head = 2\nn_embd = 128\nblock_size = 64\n"
      "vocab_size = 256\n"
      "[data]\ntrain = \"" + (dir / "tiny_train_*.bin").string() + "\"\n"
      "val = \"" + (dir / "tiny_val_*.bin").string() + "\"\ntokenizer = \"byte\"\n"
      "[train]\ndevice = \"cuda\"\nprecision = \"bf16\"\nbatch_size = 8\nseq_len = 64\n"
      "steps = " + std::to_string(steps) + "\nwarmup_steps = 5\nlr = 1e-3\neval_batches = 1\n"
      "[run]\ndir = \"" + (dir / "runs").string() + "\"\n";
  std::ofstream(dir / "gpu.toml") << cfg;
  return (dir / "gpu.toml").string();
}

// A fresh folder `name` with byte-level shards (400,000 training tokens, 8,000 validation)
// and gpu_config for `steps` steps in it: the set-up of most multi-GPU tests.
struct GpuRunDir {
  fs::path dir;
  std::string cfg;
};
inline GpuRunDir gpu_run_dir(const std::string& name, int64_t steps) {
  GpuRunDir r{temp_dir(name), ""};
  write_byte_shards(r.dir, 400000, 8000);
  r.cfg = gpu_config(r.dir, steps);
  return r;
}

inline std::map<std::string, train::SafeTensor> weights(const fs::path& run, int step) {
  fs::path p = run / "checkpoints" / train::checkpoint_name(step) / "model.safetensors";
  return train::safetensors_parse(read_bytes(p), p.string());
}

// Relative L2 distance of two runs' weights at a step.
inline double weight_distance(const fs::path& a, const fs::path& b, int step) {
  auto w1 = weights(a, step), w2 = weights(b, step);
  double diff2 = 0, norm2 = 0;
  for (const auto& [name, t] : w1) {
    const auto& u = w2.at(name);
    for (size_t i = 0; i < t.data.size(); ++i) {
      diff2 += double(t.data[i] - u.data[i]) * double(t.data[i] - u.data[i]);
      norm2 += double(t.data[i]) * double(t.data[i]);
    }
  }
  return std::sqrt(diff2 / norm2);
}

struct LossComparison {
  double max_rel = 0, mean_rel = 0;
};
// Losses of steps [from, to) (1-based step numbers) of two metrics files.
inline LossComparison compare_losses(const std::vector<nlohmann::json>& a, const std::vector<nlohmann::json>& b,
                              size_t from, size_t to, double per_step_tol, const char* what) {
  LossComparison c;
  double sum = 0;
  for (size_t i = from - 1; i + 1 < to; ++i) {
    const double x = a.at(i)["loss"], y = b.at(i)["loss"];
    const double rel = std::abs(x - y) / std::abs(x);
    c.max_rel = std::max(c.max_rel, rel);
    sum += rel;
    EXPECT_LT(rel, per_step_tol) << what << ", step " << i + 1 << ": " << x << " vs " << y;
  }
  c.mean_rel = sum / static_cast<double>(to - from);
  return c;
}

// A parallel layout for run_resumed_across: the command up to its options (e.g. "launch -n 2
// --threads-per-rank 4 -- train -q "), the --set keys that select the layout, and those that
// switch a run resumed in it over from the other layout.
struct Layout {
  std::string command, keys, resume_keys;
};
// The runs compare_resumed_runs compares, under <dir>/runs, from the config `cfg` of 20
// steps: "straight" in layout `first`; "a", 10 steps in `first` resumed to 20 in `second`;
// "b", 10 steps in `second` resumed to 20 in `first`. Each must succeed.
struct ResumedRuns {
  RunOutput straight, a10, a20, b10, b20;
};
inline void run_resumed_across(const fs::path& dir, const std::string& cfg, const Layout& first,
                               const Layout& second, ResumedRuns* out) {
  out->straight = run_aiscale(first.command + "-c " + cfg + " --set run.name=straight" + first.keys);
  ASSERT_EQ(out->straight.exit_code, 0) << out->straight.output;
  out->a10 = run_aiscale(first.command + "-c " + cfg + " --set run.name=a train.steps=10" + first.keys);
  ASSERT_EQ(out->a10.exit_code, 0) << out->a10.output;
  out->a20 = run_aiscale(second.command + "--resume " + (dir / "runs/a").string() + " --set train.steps=20" +
                         second.resume_keys);
  ASSERT_EQ(out->a20.exit_code, 0) << out->a20.output;
  out->b10 = run_aiscale(second.command + "-c " + cfg + " --set run.name=b train.steps=10" + second.keys);
  ASSERT_EQ(out->b10.exit_code, 0) << out->b10.output;
  out->b20 = run_aiscale(first.command + "--resume " + (dir / "runs/b").string() + " --set train.steps=20" +
                         first.resume_keys);
  ASSERT_EQ(out->b20.exit_code, 0) << out->b20.output;
}

// Three runs of 20 steps under <dir>/runs: "straight", and "a" and "b", each 10 steps in
// one layout resumed to 20 in another. Steps 11-20 of a and b against the straight run's
// losses (1e-2 per step: a slice written to or read from the wrong place would jump the
// loss at step 11) and their final weights against its (5e-2 relative L2).
struct ResumeComparison {
  LossComparison a, b;
  double weights_a = 0, weights_b = 0;
};
inline void compare_resumed_runs(const fs::path& dir, const std::string& what_a, const std::string& what_b,
                                 ResumeComparison* out) {
  auto ms = read_metrics(dir / "runs/straight"), ma = read_metrics(dir / "runs/a"),
       mb = read_metrics(dir / "runs/b");
  ASSERT_EQ(ms.size(), 20u);
  ASSERT_EQ(ma.size(), 20u);
  ASSERT_EQ(mb.size(), 20u);
  out->a = compare_losses(ms, ma, 11, 21, 1e-2, what_a.c_str());
  out->b = compare_losses(ms, mb, 11, 21, 1e-2, what_b.c_str());
  out->weights_a = weight_distance(dir / "runs/straight", dir / "runs/a", 20);
  out->weights_b = weight_distance(dir / "runs/straight", dir / "runs/b", 20);
  EXPECT_LT(out->weights_a, 5e-2);
  EXPECT_LT(out->weights_b, 5e-2);
}

// A layout refused before any GPU memory is taken: a non-zero exit, and the output names
// the setting that fixes it.
inline void expect_refused(const RunOutput& r, const std::string& fix) {
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find(fix), std::string::npos) << r.output;
}

// For a test that needs more GPUs than the program's 2: exit code 77 (CTest: skipped)
// where fewer are visible.
inline void need_gpus(int n) {
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess || gpus < n) {
    std::printf("skipped: %d GPU(s) visible, this test needs %d%s\n", gpus, n,
                shared_gpu() ? " (AISCALE_TEST_SHARED_GPU=1 shares one GPU between 2 ranks only)" : "");
    std::fflush(stdout);
    std::exit(77);
  }
}

// `ranks` GPUs (B = 16 / ranks, or less with micro-steps) against 1 GPU x B = 16
// (tolerances: see the test).
inline void expect_like_one_gpu(const std::string& two_set, const char* what, int ranks = 2,
                         const std::string& env = "") {
  const auto [dir, cfg] = gpu_run_dir("gpu2-ddp", 50);
  auto one = run_aiscale("train -q -c " + cfg + " --set train.batch_size=16 run.name=one");
  ASSERT_EQ(one.exit_code, 0) << one.output;
  auto two = run_aiscale("launch -n " + std::to_string(ranks) + " --threads-per-rank 4 -- train -q -c " +
                         cfg + " --set run.name=two parallel.communicator=nccl " + two_set, env);
  ASSERT_EQ(two.exit_code, 0) << two.output;
  EXPECT_NE(two.output.find(std::to_string(ranks) + " rank(s) [" + ranks_backend() + "]"), std::string::npos)
      << two.output;
  auto m1 = read_metrics(dir / "runs/one"), m2 = read_metrics(dir / "runs/two");
  ASSERT_EQ(m1.size(), 50u);
  ASSERT_EQ(m2.size(), 50u);
  const double l1 = m1[0]["loss"], l2 = m2[0]["loss"], g1 = m1[0]["grad_norm"], g2 = m2[0]["grad_norm"];
  EXPECT_NEAR(l2, l1, 1e-3 * l1) << what;
  EXPECT_NEAR(g2, g1, 1e-3 * g1) << what;
  const LossComparison c = compare_losses(m1, m2, 1, 51, 1e-2, what);
  EXPECT_LT(c.mean_rel, 3e-3) << what;
  EXPECT_LT(double(m2.back()["loss"]), double(m2.front()["loss"]) - 0.5) << "2-GPU training did not learn";
  const double weight_rel = weight_distance(dir / "runs/one", dir / "runs/two", 50);
  EXPECT_LT(weight_rel, 5e-2) << what;
  std::printf("[gpu2] 1 GPU x16 vs %d GPUs, %s, bf16, 50 steps: step-1 loss %.6f vs %.6f, grad norm "
              "%.6f vs %.6f; loss relative difference max %.2e mean %.2e; final weights relative "
              "L2 difference %.2e\n", ranks, what, l1, l2, g1, g2, c.max_rel, c.mean_rel, weight_rel);
}

// ZeRO stage `stage` against plain data parallelism on the same 2 GPUs (the same sums in
// another order; tolerances those of the 1-vs-2-GPU comparison), the checkpoints holding
// the whole optimizer state gathered from the shards. `extra`: more --set keys.
inline void expect_zero_like_ddp(int stage, const std::string& extra) {
  const std::string name = "ZeRO-" + std::to_string(stage);
  const auto [dir, cfg] = gpu_run_dir("gpu2-zero" + std::to_string(stage), 50);
  const std::string launch = "launch -n 2 --threads-per-rank 4 -- train -q -c " + cfg +
                             " --set train.batch_size=8 parallel.communicator=nccl " + extra + " ";
  auto ddp = run_aiscale(launch + "run.name=ddp");
  ASSERT_EQ(ddp.exit_code, 0) << ddp.output;
  auto zero = run_aiscale(launch + "run.name=zero parallel.zero_stage=" + std::to_string(stage));
  ASSERT_EQ(zero.exit_code, 0) << zero.output;
  auto m1 = read_metrics(dir / "runs/ddp"), m2 = read_metrics(dir / "runs/zero");
  ASSERT_EQ(m1.size(), 50u);
  ASSERT_EQ(m2.size(), 50u);
  EXPECT_NEAR(double(m2[0]["grad_norm"]), double(m1[0]["grad_norm"]), 1e-3 * double(m1[0]["grad_norm"]));
  const LossComparison c = compare_losses(m1, m2, 1, 51, 1e-2, (name + " vs DDP").c_str());
  EXPECT_LT(c.mean_rel, 3e-3);
  const double weight_rel = weight_distance(dir / "runs/ddp", dir / "runs/zero", 50);
  EXPECT_LT(weight_rel, 5e-2);
  auto s1 = train::read_checkpoint((dir / "runs/ddp/checkpoints" / train::checkpoint_name(50)).string(), true);
  auto s2 = train::read_checkpoint((dir / "runs/zero/checkpoints" / train::checkpoint_name(50)).string(), true);
  ASSERT_EQ(s1.m.size(), s2.m.size());
  const double m_rel = vector_distance(s1.m, s2.m), v_rel = vector_distance(s1.v, s2.v);
  EXPECT_LT(m_rel, 1e-1);
  EXPECT_LT(v_rel, 1e-1);
  std::printf("[gpu2] %s vs DDP, 2 GPUs x8, bf16, 50 steps: step-1 grad norm %.6f vs %.6f; loss "
              "relative difference max %.2e mean %.2e; final weights relative L2 %.2e; AdamW m %.2e, "
              "v %.2e\n", name.c_str(), double(m1[0]["grad_norm"]), double(m2[0]["grad_norm"]), c.max_rel,
              c.mean_rel, weight_rel, m_rel, v_rel);
}

// Sharded state through checkpoints: 10 steps under ZeRO stage `stage` resumed to 20
// without it, and 10 without resumed to 20 under it, against 20 straight steps under it.
// A shard written to or read from the wrong place would jump the loss at step 11.
inline void expect_zero_state_survives_checkpoints(int stage, const std::string& extra) {
  const std::string name = "ZeRO-" + std::to_string(stage);
  const auto [dir, cfg] = gpu_run_dir("gpu2-zero" + std::to_string(stage) + "-ckpt", 20);
  const std::string launch = "launch -n 2 --threads-per-rank 4 -- train -q ";
  // A constant learning rate after warm-up: the 10-step runs must follow the 20-step
  // run's schedule (a cosine decay depends on train.steps).
  const std::string common = " parallel.communicator=nccl train.schedule=constant" + extra;
  const std::string zero = " parallel.zero_stage=" + std::to_string(stage);
  ResumedRuns runs;
  ASSERT_NO_FATAL_FAILURE(run_resumed_across(dir, cfg, {launch, zero + common, zero},
                                             {launch, " parallel.zero_stage=0" + common, " parallel.zero_stage=0"},
                                             &runs));
  ResumeComparison r;
  ASSERT_NO_FATAL_FAILURE(compare_resumed_runs(dir, name + " -> DDP resume", "DDP -> " + name + " resume", &r));
  std::printf("[gpu2] checkpoints across %s: steps 11-20 loss relative difference max %.2e "
              "(%s -> DDP) and %.2e (DDP -> %s); final weights relative L2 %.2e and %.2e\n",
              name.c_str(), r.a.max_rel, name.c_str(), r.b.max_rel, name.c_str(), r.weights_a, r.weights_b);
}

// The main() of a multi-GPU test program: exit code 77 (CTest: skipped) with fewer than
// 2 GPUs or without NCCL, except with AISCALE_TEST_SHARED_GPU=1 and one GPU visible: then
// 2 ranks share it over MPI (see the top), unless the program is about NCCL itself
// (`nccl_only`: why, printed with the skip) or aiscale was built without MPI. NVLink
// multicast (NVLS) kept off, since on shared machines it can take GPUs out of service.
inline int run_multi_gpu_tests(int argc, char** argv, const char* nccl_only = nullptr) {
  setenv("NCCL_NVLS_ENABLE", "0", 0);
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess) gpus = 0;
  const char* shared = std::getenv("AISCALE_TEST_SHARED_GPU");
  if (gpus == 1 && shared && std::string(shared) == "1") {
    if (nccl_only) {
      std::printf("skipped: 2 ranks would share one GPU over MPI here (AISCALE_TEST_SHARED_GPU=1): "
                  "%s\n", nccl_only);
      return 77;
    }
    if (!aiscale::parallel::mpi_compiled()) {
      std::printf("skipped: AISCALE_TEST_SHARED_GPU=1 runs 2 ranks over MPI, and aiscale was "
                  "built without MPI\n");
      return 77;
    }
    shared_gpu_ranks() = true;
    std::printf("AISCALE_TEST_SHARED_GPU=1: 2 ranks share the one visible GPU over MPI "
                "(parallel.communicator = \"mpi\")\n");
  } else {
    if (gpus < 2) {
      std::printf("skipped: %d GPU(s) visible, these tests need 2 (or 1 with "
                  "AISCALE_TEST_SHARED_GPU=1: 2 ranks sharing it over MPI)\n", gpus);
      return 77;
    }
    if (!aiscale::parallel::nccl_compiled()) {
      std::printf("skipped: aiscale was built without NCCL\n");
      return 77;
    }
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}

}  // namespace aiscale::testsupport::gpu2
