// Data parallelism over NCCL on 2 GPUs, through the aiscale binary:
// - 2 GPUs x batch B train like 1 GPU x batch 2B (bf16), with the gradient buckets
//   overlapped with backward, also with gradient accumulation and small buckets, and with
//   the gradients summed in bf16, and with the buckets moved by the copy engines (CUDA IPC)
//   instead of NCCL's kernels; over the copy engines the gradient norm fused into the
//   sums equals the norm's own pass;
// - ZeRO-1 trains like plain data parallelism, and its sharded state survives checkpoints
//   (written under ZeRO-1 and resumed without it, and the other way round);
// - ranks started without MPI meet through a rendezvous file, and under the real torchrun;
// - a rank that dies makes the other fail within a bounded time instead of hanging.
// Exit code 77 (skipped) with fewer than 2 GPUs or without NCCL. With one GPU and
// AISCALE_TEST_SHARED_GPU=1 two ranks share it over MPI (the ranks started by hand over
// TCP), the tests of NCCL itself and of the copy engines skipped (gpu2_support.h).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include <cuda_runtime.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include "aiscale/parallel/comm.h"
#include "aiscale/train/checkpoint.h"
#include "aiscale/train/safetensors.h"
#include "../support/run_support.h"
#include "gpu2_support.h"

using namespace aiscale;
using namespace aiscale::testsupport;

using namespace aiscale::testsupport::gpu2;

namespace {

// Two ranks started by hand, as srun without MPI would start them (SLURM_* variables),
// meeting through a rendezvous file. Returns each rank's exit code and output.
struct TwoRanks {
  RunOutput rank[2];
  double seconds = 0;
};
TwoRanks run_two_ranks_by_hand(const fs::path& dir, const std::string& args, const std::string& env) {
  // Absolute paths, and both ranks in one group: `cd X && (A) & (B) &` would run the cd
  // in A's background list only.
  std::string cmd = "{ ";
  for (int r = 0; r < 2; ++r) {
    const std::string base = (dir / ("rank" + std::to_string(r))).string();
    cmd += "(cd " + dir.string() + " && env SLURM_PROCID=" + std::to_string(r) +
           " SLURM_NTASKS=2 SLURM_LOCALID=" + std::to_string(r) + " " + env + " timeout 240 " +
           AISCALE_BINARY + " " + args + " > " + base + ".log 2>&1; echo $? > " + base + ".rc) & ";
  }
  cmd += "wait; }";
  auto start = std::chrono::steady_clock::now();
  run_command(cmd);
  TwoRanks t;
  t.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (int r = 0; r < 2; ++r) {
    const fs::path rc = dir / ("rank" + std::to_string(r) + ".rc");
    t.rank[r].output = read_bytes(dir / ("rank" + std::to_string(r) + ".log"));
    t.rank[r].exit_code = fs::exists(rc) ? std::atoi(read_bytes(rc).c_str()) : -1;
  }
  return t;
}

}  // namespace

// 2 GPUs x B = 8 must train like 1 GPU x B = 16: the loader gives rank r the r-th half of
// every global batch, rank 0's weights are broadcast, gradients are averaged by NCCL.
//
// Tolerances. Step 1 starts from the same weights and data, so the loss and the gradient
// norm differ only by the order of fp32 sums (the weight-gradient GEMMs reduce over 1024
// tokens on one GPU, over 2 x 512 plus the all-reduce on two) and by cuBLASLt choosing
// (autotuning) other kernels for 512 than for 1024 rows, which can flip a bf16 activation
// by one unit in the last place (2^-8 = 0.4% of it) here and there: 1e-3 relative is ample
// for both, and a missing all-reduce or a missing division by the world size would put
// the gradient norm off by ~2x. Later steps compound those bf16 rounding differences
// through 50 AdamW updates; a loss within 1% (about 2.5 bf16 units in the last place) at
// every step, and within 0.3% on average, is what bf16 arithmetic allows, and the weights
// after 50 steps must agree to 5% (relative L2).
// (NCCL's transport named: the default, "auto", takes the copy engines on Hopper GPUs,
// which CopyEngineTransportMatchesOneGpu checks.)
TEST(Gpu2, DdpMatchesOneGpuWithTwiceTheBatch) {
  expect_like_one_gpu("train.batch_size=8 parallel.grad_transport=nccl",
                      "x8, buckets overlapped with backward");
}

// The same with 2 micro-steps of 4 (the first communicates nothing, the second reduces
// what both accumulated, the embedding gradient of the first included) and 0.25 MiB
// buckets (one per layer here, so several reductions run during backward).
TEST(Gpu2, DdpWithGradientAccumulationAndSmallBuckets) {
  expect_like_one_gpu("train.batch_size=4 train.grad_accum=2 parallel.bucket_mib=0.25 "
                      "parallel.grad_transport=nccl", "x4 x 2 micro-steps, 0.25 MiB buckets");
}

// Gradients summed in bf16 (parallel.grad_comm = bf16): each bucket rounded to bf16 before
// the sum. The rounding (at most 2^-9 relative per value, unbiased) moves the gradient norm
// far less than 1e-3 and acts on training like noise well inside the bf16 tolerances above;
// plain data parallelism and ZeRO-1 (whose parts are widened back separately) both.
TEST(Gpu2, Bf16GradientCommunication) {
  expect_like_one_gpu("train.batch_size=8 parallel.grad_comm=bf16 parallel.bucket_mib=0.3 "
                      "parallel.grad_transport=nccl", "x8, gradients summed in bf16");
  expect_like_one_gpu("train.batch_size=8 parallel.grad_comm=bf16 parallel.bucket_mib=0.3 "
                      "parallel.zero_stage=1 parallel.grad_transport=nccl",
                      "x8, ZeRO-1, gradients summed in bf16");
}

// The buckets moved by the copy engines over CUDA IPC (parallel.grad_transport =
// copy-engine) instead of NCCL's kernels: the same sums (each rank sums its chunk in rank
// order, the others copy it), so the tolerances of the NCCL test. Small buckets and 2
// micro-steps exercise many calls per step and the reuse of the staging ring; bf16 sums
// the rounded values like NCCL does.
TEST(Gpu2, CopyEngineTransportMatchesOneGpu) {
  skip_on_shared_gpu("the copy engines map the peers' GPU memory beside NCCL ranks");
  expect_like_one_gpu("train.batch_size=8 parallel.grad_transport=copy-engine",
                      "x8, copy-engine transport");
  expect_like_one_gpu("train.batch_size=4 train.grad_accum=2 parallel.bucket_mib=0.25 "
                      "parallel.grad_transport=copy-engine",
                      "x4 x 2 micro-steps, 0.25 MiB buckets, copy-engine transport");
  expect_like_one_gpu("train.batch_size=8 parallel.grad_comm=bf16 parallel.bucket_mib=0.3 "
                      "parallel.grad_transport=copy-engine",
                      "x8, gradients summed in bf16, copy-engine transport");
  expect_like_one_gpu("train.batch_size=8 parallel.zero_stage=1 parallel.bucket_mib=0.3 "
                      "parallel.grad_transport=copy-engine",
                      "x8, ZeRO-1, copy-engine transport");
  // Rank 1 a straggler: rank 0 pushes its d(res0) into rank 1's memory as soon as its own
  // backward ends, while rank 1 has not yet started its backward (whose LM head reads the
  // dlogits that rank 1's forward left in its logits buffer).
  expect_like_one_gpu("train.batch_size=8 parallel.grad_transport=copy-engine",
                      "x8, copy-engine transport, rank 1 waiting 5 ms before each backward", 2,
                      "AISCALE_FAULT=slow@1:5");
}

// Over the copy engines the gradient norm comes out of the buckets' sum kernels (each
// rank's share of the squares, gathered) plus a pass over the embeddings. Against the
// norm's own pass over the whole buffer (AISCALE_CUDA_FUSED_NORM=0) on the same two GPUs,
// with autotuning off so that both runs compute the same gradients, only the order of the
// squares' additions differs: the norms agree to ~1e-8 relative at step 1 (1e-6 asked). A
// bucket missed or counted twice, even layer 0's first LayerNorm alone, would show, and
// squares left over from step 1 would show at step 2 or 3 (1e-5 asked: the clip scale of
// step 1 may round differently, and bf16 training lets such a difference grow by orders
// of magnitude within ten steps, measured on 2x H200, so later steps are not compared).
void expect_fused_norm_like_its_pass(const std::string& set, const char* what) {
  constexpr size_t kSteps = 3;
  const auto [dir, cfg] = gpu_run_dir("gpu2-norm", int64_t(kSteps));
  const std::string run = "launch -n 2 --threads-per-rank 4 -- train -q -c " + cfg +
                          " --set parallel.communicator=nccl parallel.grad_transport=copy-engine "
                          "train.grad_clip=0.5 train.warmup_steps=1 " + set;
  auto fused = run_aiscale(run + " run.name=fused", "env AISCALE_CUDA_AUTOTUNE=0");
  ASSERT_EQ(fused.exit_code, 0) << fused.output;
  auto pass = run_aiscale(run + " run.name=pass", "env AISCALE_CUDA_AUTOTUNE=0 AISCALE_CUDA_FUSED_NORM=0");
  ASSERT_EQ(pass.exit_code, 0) << pass.output;
  auto a = read_metrics(dir / "runs/fused"), b = read_metrics(dir / "runs/pass");
  ASSERT_EQ(a.size(), kSteps);
  ASSERT_EQ(b.size(), kSteps);
  double worst = 0;
  std::string series;
  for (size_t i = 0; i < kSteps; ++i) {
    const double x = a[i]["grad_norm"], y = b[i]["grad_norm"];
    const double rel = std::abs(x - y) / y;
    worst = std::max(worst, i == 0 ? 0.0 : rel);
    EXPECT_LT(rel, i == 0 ? 1e-6 : 1e-5) << what << ", step " << i + 1 << ": " << x << " vs " << y;
    char pair[64];
    std::snprintf(pair, sizeof pair, " %.6f/%.6f", x, y);
    series += pair;
  }
  std::printf("[gpu2] copy engines, %s: gradient norm fused vs own pass, step 1 %.9f vs %.9f, "
              "steps 2-%zu relative difference max %.2e; fused/pass:%s\n", what,
              double(a[0]["grad_norm"]), double(b[0]["grad_norm"]), kSteps, worst, series.c_str());
}

TEST(Gpu2, CopyEngineFusedNormMatchesItsOwnPass) {
  skip_on_shared_gpu("the copy engines map the peers' GPU memory beside NCCL ranks");
  expect_fused_norm_like_its_pass("parallel.bucket_mib=0.3", "buckets overlapped with backward");
  expect_fused_norm_like_its_pass("parallel.overlap=false", "one bucket after backward");
  expect_fused_norm_like_its_pass("train.batch_size=4 train.grad_accum=2 parallel.bucket_mib=0.25",
                                  "2 micro-steps, 0.25 MiB buckets");
}

// ZeRO-1 against plain data parallelism on the same 2 GPUs. Both sum the same gradients
// (reduce-scatter vs all-reduce: the same sums, possibly in another order) and run the same
// AdamW arithmetic, ZeRO-1 on each rank's part; only summation order and bf16 rounding of
// the working copy can differ, so the tolerances are those of the 1-vs-2-GPU test. The
// checkpoints hold the whole optimizer state, gathered from the shards.
TEST(Gpu2, ZeroOneMatchesDdp) {
  expect_zero_like_ddp(1, " parallel.bucket_mib=0.3 parallel.grad_transport=nccl");
}

// Sharded state through checkpoints: 10 steps under ZeRO-1 resumed to 20 without it, and
// 10 steps without resumed to 20 under ZeRO-1, both against 20 straight ZeRO-1 steps. A
// shard written to or read from the wrong place would jump the loss at step 11.
TEST(Gpu2, ZeroOneStateSurvivesCheckpoints) {
  expect_zero_state_survives_checkpoints(1, " parallel.bucket_mib=0.3 parallel.grad_transport=nccl");
}

// The communicator of the ranks started by hand (no MPI launcher): NCCL, or TCP where 2
// ranks share one GPU.
std::string by_hand_communicator() { return shared_gpu() ? "tcp" : "nccl"; }

// srun without an MPI plugin: ranks from SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID, the
// NCCL id (or the TCP store's address) through a file; the file is removed once every rank
// has joined.
TEST(Gpu2, FileRendezvousWithoutMpi) {
  auto dir = temp_dir("gpu2-file");
  write_byte_shards(dir);
  const std::string cfg = gpu_config(dir, 5);
  const std::string rdv = (dir / "rdv").string();
  auto t = run_two_ranks_by_hand(
      dir, "train -q -c " + cfg + " --set run.name=file parallel.communicator=" +
           by_hand_communicator() + " parallel.rendezvous=file:" + rdv, "");
  ASSERT_EQ(t.rank[0].exit_code, 0) << t.rank[0].output;
  ASSERT_EQ(t.rank[1].exit_code, 0) << t.rank[1].output;
  const std::string backend = shared_gpu() ? "tcp+host-staging" : "nccl";
  EXPECT_NE(t.rank[0].output.find("2 rank(s) [" + backend + "]"), std::string::npos) << t.rank[0].output;
  EXPECT_EQ(read_metrics(dir / "runs/file").size(), 5u);
  EXPECT_FALSE(fs::exists(rdv));
}

// Rank 1 kills itself (SIGKILL) after step 3 and no launcher ends rank 0: rank 0's next
// collective stalls, and after parallel.timeout_s it aborts NCCL (or gives up on the copy
// engines' flags) and exits with an error. Over TCP (2 ranks sharing one GPU) rank 0's next
// collective fails at once, naming rank 1, whose connection closed.
namespace {
void expect_dead_rank_ends_the_peer(const std::string& extra) {
  auto dir = temp_dir("gpu2-dead");
  write_byte_shards(dir);
  const std::string cfg = gpu_config(dir, 200);
  const double timeout_s = 15;
  auto t = run_two_ranks_by_hand(
      dir, "train -q -c " + cfg + " --set run.name=dead parallel.communicator=" +
           by_hand_communicator() + " parallel.rendezvous=file:" + (dir / "rdv").string() +
           " parallel.timeout_s=" + std::to_string(static_cast<int>(timeout_s)) + " " + extra,
      "AISCALE_FAULT=kill@3:1");
  EXPECT_EQ(t.rank[1].exit_code, 137) << t.rank[1].output;  // 128 + SIGKILL
  EXPECT_NE(t.rank[0].exit_code, 0) << t.rank[0].output;
  EXPECT_NE(t.rank[0].exit_code, 124) << "rank 0 hung until `timeout` ended it:\n" << t.rank[0].output;
  EXPECT_LT(t.seconds, timeout_s + 60) << t.rank[0].output;
  EXPECT_NE(t.rank[0].output.find(shared_gpu() ? "rank 1 has closed its connection" : "peer rank"),
            std::string::npos) << t.rank[0].output;
  EXPECT_FALSE(fs::exists(dir / "runs/dead/summary.json"));
  std::printf("[gpu2] dead rank: rank 0 exited with code %d after %.1f s (timeout %.0f s): %s\n",
              t.rank[0].exit_code, t.seconds, timeout_s,
              t.rank[0].output.substr(t.rank[0].output.rfind("error") == std::string::npos
                                          ? 0 : t.rank[0].output.rfind("error")).c_str());
}

}  // namespace

// Communicator::split on NCCL (ncclCommSplit): groups of both ranks, singletons, a group
// only rank 0 joins, a split of a split (tests/gpu2/nccl_split_ranks.cpp checks the sums).
TEST(Gpu2, NcclSplitIntoGroups) {
  skip_on_shared_gpu("this checks NCCL's own split");
  auto r = run_command("mpirun --allow-run-as-root --bind-to none -np 2 -x NCCL_NVLS_ENABLE " +
                       std::string(AISCALE_GPU2_SPLIT_RANKS));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("nccl split checks passed on rank 0"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("nccl split checks passed on rank 1"), std::string::npos) << r.output;
}

// Two ranks started torchrun-style, without MPI: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR
// and MASTER_PORT; NCCL's id travels through aiscale's TCP store on rank 0, and the
// all-reduce benchmark checks one all-reduce per size against the exact sum.
TEST(Gpu2, TorchrunStyleLaunchMeetsThroughTheTcpStore) {
  skip_on_shared_gpu("this passes NCCL's id through the TCP store and measures NCCL's all-reduce");
  auto dir = temp_dir("gpu2-torchrun");
  const int port = 29500 + static_cast<int>(::getpid() % 2000);
  std::string cmd = "{ ";
  for (int r = 0; r < 2; ++r) {
    const std::string base = (dir / ("rank" + std::to_string(r))).string();
    cmd += "(env -u OMPI_COMM_WORLD_RANK -u OMPI_COMM_WORLD_SIZE RANK=" + std::to_string(r) +
           " WORLD_SIZE=2 LOCAL_RANK=" + std::to_string(r) + " LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" +
           std::to_string(port) + " timeout 120 " + AISCALE_BINARY +
           " bench allreduce --backend nccl --max-bytes 4194304 --iters 5 > " + base + ".log 2>&1; echo $? > " +
           base + ".rc) & ";
  }
  cmd += "wait; }";
  run_command(cmd);
  for (int r = 0; r < 2; ++r) {
    const std::string log = read_bytes(dir / ("rank" + std::to_string(r) + ".log"));
    EXPECT_EQ(std::atoi(read_bytes(dir / ("rank" + std::to_string(r) + ".rc")).c_str()), 0) << log;
    if (r == 0) {
      EXPECT_NE(log.find("\"world_size\":2"), std::string::npos) << log;
      EXPECT_EQ(log.find("\"correct\":false"), std::string::npos) << log;
    }
  }
  fs::remove_all(dir);
}

// The real torchrun (the host's `torchrun`, else python3 -m torch.distributed.run):
// --standalone with 2 GPUs trains like 1 GPU with the whole batch (the tolerances of
// expect_like_one_gpu), NCCL's id travelling through aiscale's store beside the agent's; the
// static rendezvous, whose agent serves its store on --master_port
// (TORCHELASTIC_USE_AGENT_STORE=True), puts aiscale's store on the next port. "-r 2 -t 2"
// (stderr to a file and the console) because torch 1.13 under Python 3.11 cannot parse its
// own default "0"; torch 2.x takes it alike.
TEST(Gpu2, TorchrunTrainsOnTwoGpus) {
  skip_on_shared_gpu("torchrun's ranks train over NCCL here");
  std::string torchrun;
  if (run_command("command -v torchrun").exit_code == 0) torchrun = "torchrun";
  else if (run_command("python3 -c 'import torch.distributed.run'").exit_code == 0)
    torchrun = "python3 -m torch.distributed.run";
  ASSERT_FALSE(torchrun.empty()) << "no torchrun on PATH and no PyTorch for python3: install "
                                    "PyTorch on this GPU host to run this test";
  torchrun += " -r 2 -t 2 ";
  const auto [dir, cfg] = gpu_run_dir("gpu2-torchrun", 50);
  auto one = run_aiscale("train -q -c " + cfg + " --set train.batch_size=16 run.name=one");
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const std::string train = std::string(" --no_python ") + AISCALE_BINARY + " train -q -c " + cfg +
                            " --set train.batch_size=8 parallel.communicator=nccl run.name=";
  auto two = run_command("env -u OMPI_COMM_WORLD_RANK -u OMPI_COMM_WORLD_SIZE OMP_NUM_THREADS=4 " +
                         torchrun + "--standalone --nproc_per_node=2" + train + "two");
  ASSERT_EQ(two.exit_code, 0) << two.output;
  EXPECT_NE(two.output.find("2 rank(s) [nccl]"), std::string::npos) << two.output;
  auto m1 = read_metrics(dir / "runs/one"), m2 = read_metrics(dir / "runs/two");
  ASSERT_EQ(m1.size(), 50u);
  ASSERT_EQ(m2.size(), 50u);
  EXPECT_NEAR(double(m2[0]["loss"]), double(m1[0]["loss"]), 1e-3 * double(m1[0]["loss"]));
  const LossComparison c = compare_losses(m1, m2, 1, 51, 1e-2, "torchrun --standalone");
  EXPECT_LT(c.mean_rel, 3e-3);
  EXPECT_LT(weight_distance(dir / "runs/one", dir / "runs/two", 50), 5e-2);

  const int port = 29500 + static_cast<int>(::getpid() % 2000) * 2;
  auto st = run_command("env -u OMPI_COMM_WORLD_RANK -u OMPI_COMM_WORLD_SIZE OMP_NUM_THREADS=4 " +
                        torchrun + "--rdzv_backend=static --master_addr=127.0.0.1 --master_port=" +
                        std::to_string(port) + " --nnodes=1 --node_rank=0 --nproc_per_node=2" + train +
                        "static train.steps=5");
  ASSERT_EQ(st.exit_code, 0) << st.output;
  EXPECT_NE(st.output.find("TCP store 127.0.0.1:" + std::to_string(port + 1)), std::string::npos) << st.output;
  EXPECT_EQ(read_metrics(dir / "runs/static").size(), 5u);
  std::printf("[gpu2] torchrun --standalone, 2 GPUs x8 vs 1 GPU x16, 50 steps: loss relative "
              "difference max %.2e mean %.2e; static rendezvous: aiscale's store on port %d\n",
              c.max_rel, c.mean_rel, port + 1);
}

TEST(Gpu2, DeadRankEndsThePeer) { expect_dead_rank_ends_the_peer("parallel.grad_transport=nccl"); }

TEST(Gpu2, DeadRankEndsThePeerWithCopyEngineTransport) {
  skip_on_shared_gpu("the copy engines map the peers' GPU memory beside NCCL ranks");
  expect_dead_rank_ends_the_peer("parallel.grad_transport=copy-engine");
}

// AISCALE_CUDA_TIMING=1 on 2 ranks over the copy engines: every rank prints its phase
// means and the forward phase split where its kernels end; the two parts add up to the
// forward phase (the same events' intervals), the kernels take time, and the host's parts
// of forward() are reported.
TEST(Gpu2, PhaseTimingSplitsTheForward) {
  skip_on_shared_gpu("this runs over the copy-engine transport");
  auto dir = temp_dir("gpu2-timing");
  write_byte_shards(dir);
  const std::string cfg = gpu_config(dir, 8);
  auto r = run_aiscale("launch -n 2 --threads-per-rank 4 -- train -q -c " + cfg +
                           " --set run.name=timed parallel.communicator=nccl "
                           "parallel.grad_transport=copy-engine",
                       "env AISCALE_CUDA_TIMING=1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (int rank = 0; rank < 2; ++rank) {
    const std::string tag = "[aiscale cuda] rank " + std::to_string(rank) + ": ";
    const size_t m = r.output.find(tag + "mean of");
    const size_t f = r.output.find(tag + "forward split");
    ASSERT_NE(m, std::string::npos) << r.output;
    ASSERT_NE(f, std::string::npos) << r.output;
    long long steps = 0;
    double forward = -1, kernels = -1, waiting = -1, launches = -1;
    ASSERT_EQ(std::sscanf(r.output.c_str() + m + tag.size(), "mean of %lld steps (ms): forward %lf",
                          &steps, &forward), 2) << r.output;
    ASSERT_EQ(std::sscanf(r.output.c_str() + f + tag.size(),
                          "forward split (ms): kernels up to the loss %lf, then the GPU waiting "
                          "for backward's launch %lf; the host per forward with targets: "
                          "launches %lf", &kernels, &waiting, &launches), 3) << r.output;
    EXPECT_GT(steps, 0);
    EXPECT_GT(kernels, 0.0);
    EXPECT_GE(waiting, 0.0);
    EXPECT_GT(launches, 0.0);
    EXPECT_NEAR(kernels + waiting, forward, 0.01 + 1e-3 * forward) << r.output;
    // The medians, over the same steps.
    const size_t md = r.output.find(tag + "median of");
    ASSERT_NE(md, std::string::npos) << r.output;
    long long msteps = 0;
    double mforward = -1, mkernels = -1, mwaiting = -1;
    ASSERT_EQ(std::sscanf(r.output.c_str() + md + tag.size(),
                          "median of %lld steps (ms): forward %lf (kernels up to the loss %lf, "
                          "then waiting for backward's launch %lf)",
                          &msteps, &mforward, &mkernels, &mwaiting), 4) << r.output;
    EXPECT_EQ(msteps, steps);
    EXPECT_GT(mkernels, 0.0);
    EXPECT_GE(mwaiting, 0.0);
    EXPECT_GE(mforward, mkernels - 1e-3) << r.output;
    std::printf("[gpu2] phase timing, rank %d: forward %.3f ms = kernels %.3f + waiting for "
                "backward's launch %.3f (%lld steps)\n", rank, forward, kernels, waiting, steps);
  }
}

// `bench language` on GPUs reports each GPU's energy, power limit and SM clock over the
// timed steps (NVML), on 1 GPU and on 2 ranks, with figures a GPU can have.
TEST(Gpu2, BenchLanguageReportsGpuPower) {
  skip_on_shared_gpu("this measures each rank's own GPU, and the transport auto takes on Hopper GPUs");
  auto dir = temp_dir("gpu2-power");
  const std::string bench = "bench language --model gpt2-124m --batch 8 --seq 512 --device cuda "
                            "--precision bf16 --steps 120 --warmup 3 --output ";
  for (int ranks : {1, 2}) {
    const fs::path out = dir / ("power" + std::to_string(ranks) + ".jsonl");
    auto r = run_aiscale(ranks == 1 ? bench + out.string()
                                    : "launch -n 2 --threads-per-rank 4 -- " + bench + out.string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const std::string text = read_bytes(out);
    const nlohmann::json j = nlohmann::json::parse(text.substr(0, text.find('\n')));
    ASSERT_TRUE(j.contains("gpu_power")) << text;
    const nlohmann::json& p = j["gpu_power"];
    ASSERT_FALSE(p.contains("unavailable")) << p.dump();
    EXPECT_EQ(p["ranks_measured"], ranks) << p.dump();
    ASSERT_EQ(p["ranks"].size(), size_t(ranks));
    for (const auto& g : p["ranks"]) {
      const double watts = g["mean_power_w"], limit = g["power_limit_w"], seconds = g["seconds"];
      const double mhz = g["mean_sm_clock_mhz"], lo = g["min_sm_clock_mhz"], hi = g["max_sm_clock_mhz"];
      EXPECT_GT(seconds, 0.5) << g.dump();
      EXPECT_GT(watts, 30.0) << g.dump();
      EXPECT_LT(watts, 1.1 * limit) << g.dump();
      EXPECT_GT(limit, 50.0) << g.dump();
      EXPECT_NEAR(double(g["energy_j"]), watts * seconds, 1e-6 * watts * seconds + 1e-9);
      EXPECT_GT(lo, 100.0) << g.dump();
      EXPECT_LE(lo, mhz);
      EXPECT_LE(mhz, hi);
      EXPECT_LT(hi, 4000.0) << g.dump();
      // A training step keeps the GPU busy most of the time (NVML's utilisation, percent).
      EXPECT_GT(double(g["mean_gpu_utilization_pct"]), 50.0) << g.dump();
      EXPECT_LE(double(g["mean_gpu_utilization_pct"]), 100.0) << g.dump();
    }
    // tokens per joule: the tokens of the timed steps over every rank's energy.
    double energy = 0;
    for (const auto& g : p["ranks"]) energy += double(g["energy_j"]);
    EXPECT_NEAR(double(p["tokens_per_joule"]), 8.0 * 512 * 120 * ranks / energy,
                1e-6 * double(p["tokens_per_joule"]));
    std::printf("[gpu2] bench power, %d rank(s): %s\n", ranks, p.dump().c_str());
    // The default transport ("auto"): the copy engines on Hopper GPUs (compute capability
    // 9.0 or newer), NCCL on older ones.
    if (ranks == 2) {
      const std::string cc = run_command("nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1").output;
      const bool hopper = std::atof(cc.c_str()) >= 9.0;
      EXPECT_EQ(j["grad_transport"], hopper ? "copy-engine" : "nccl") << "compute capability " << cc;
    }
  }
}

// The copy engines' own timeout: rank 1 stalls (AISCALE_FAULT=slow@1:30000, 30 s before
// its first backward) without dying, so rank 0 sees no NCCL error; its wait for rank 1's
// gradient chunks must end after parallel.timeout_s with the copy-engine error, not hang.
TEST(Gpu2, StalledPeerEndsTheCopyEngineExchange) {
  skip_on_shared_gpu("the copy engines map the peers' GPU memory beside NCCL ranks");
  auto dir = temp_dir("gpu2-stall");
  write_byte_shards(dir);
  const std::string cfg = gpu_config(dir, 20);
  auto t = run_two_ranks_by_hand(
      dir, "train -q -c " + cfg + " --set run.name=stall parallel.communicator=nccl "
           "parallel.rendezvous=file:" + (dir / "rdv").string() +
           " parallel.timeout_s=8 parallel.grad_transport=copy-engine",
      "AISCALE_FAULT=slow@1:30000");
  EXPECT_NE(t.rank[0].exit_code, 0) << t.rank[0].output;
  EXPECT_NE(t.rank[0].exit_code, 124) << "rank 0 hung until `timeout` ended it:\n" << t.rank[0].output;
  EXPECT_NE(t.rank[0].output.find("copy-engine"), std::string::npos) << t.rank[0].output;
  EXPECT_NE(t.rank[0].output.find("did not complete within 8 s"), std::string::npos) << t.rank[0].output;
  EXPECT_LT(t.seconds, 100.0) << t.rank[0].output << t.rank[1].output;
  EXPECT_FALSE(fs::exists(dir / "runs/stall/summary.json"));
  const size_t at = t.rank[0].output.rfind("error");
  std::printf("[gpu2] stalled peer: rank 0 exited with code %d, rank 1 with %d, after %.1f s: %s\n",
              t.rank[0].exit_code, t.rank[1].exit_code, t.seconds,
              t.rank[0].output.substr(at == std::string::npos ? 0 : at).c_str());
}

// Four ranks (where 4 GPUs are visible; else the test exits 77, skipped): over NCCL, over
// the copy engines (four chunks per bucket, each summed by its owner in rank order) and
// ZeRO-1 over the copy engines, each against 1 GPU with the whole batch.
TEST(Gpu2, FourRanksMatchOneGpu) {
  need_gpus(4);
  expect_like_one_gpu("train.batch_size=4 parallel.bucket_mib=0.3 parallel.grad_transport=nccl",
                      "x4, NCCL", 4);
  expect_like_one_gpu("train.batch_size=4 parallel.bucket_mib=0.3 parallel.grad_transport=copy-engine",
                      "x4, copy-engine transport", 4);
  expect_like_one_gpu("train.batch_size=4 parallel.zero_stage=1 parallel.bucket_mib=0.3 "
                      "parallel.grad_transport=copy-engine",
                      "x4, ZeRO-1, copy-engine transport", 4);
}

int main(int argc, char** argv) { return aiscale::testsupport::gpu2::run_multi_gpu_tests(argc, argv); }
