// Choosing a communicator: config keys, their errors, and `aiscale bench allreduce`'s
// own checks (the benchmark itself runs on 2 ranks in tests/mpi/allreduce_mpitest.cpp).
#include <gtest/gtest.h>

#include "aiscale/bench/allreduce.h"
#include "aiscale/core/error.h"
#include "aiscale/nn/models/gpt.h"
#include "aiscale/parallel/comm.h"
#include "aiscale/train/config.h"
#include "../support/error_of.h"
#include "../support/run_support.h"

using namespace aiscale;
using namespace aiscale::testsupport;

namespace {

std::string config_error(const std::string& text) {
  return error_of([&] { train::parse_train_config(text, "test.toml", {}); });
}

// A communicator that only claims a size, a backend, whether it has a device stream and
// whether its collectives stay on the device (what make_gpt checks before it builds
// anything: NCCL has both, GPU ranks over MPI or TCP a stream only); its collectives do
// nothing.
class FakeRanks final : public parallel::Communicator {
 public:
  FakeRanks(int world, std::string backend, bool device, bool on_device = true)
      : world_(world), backend_(std::move(backend)), device_(device), on_device_(on_device) {}
  int rank() const override { return 0; }
  int world() const override { return world_; }
  std::string backend() const override { return backend_; }
  void allreduce_sum(float*, int64_t) override {}
  void allreduce_sum(double*, int64_t) override {}
  void broadcast(float*, int64_t, int) override {}
  void broadcast_bytes(void*, int64_t, int) override {}
  void barrier() override {}
  void abort(int) override {}
  void* device_stream() override { return device_ ? this : nullptr; }  // never used here
  bool on_device() const override { return device_ && on_device_; }

 private:
  int world_;
  std::string backend_;
  bool device_, on_device_;
};

}  // namespace

TEST(CommConfig, ParallelKeys) {
  auto c = train::parse_train_config(
      "[train]\ndevice = \"cuda\"\nprecision = \"bf16\"\n[parallel]\ncommunicator = \"nccl\"\n"
      "rendezvous = \"file:/shared/rdv\"\ngrad_reduce = \"sum\"\n",
      "t.toml", {});
  EXPECT_EQ(c.communicator, "nccl");
  EXPECT_EQ(c.rendezvous, "file:/shared/rdv");
  EXPECT_EQ(c.grad_reduce, "sum");
  auto d = train::parse_train_config("", "t.toml", {});
  EXPECT_EQ(d.communicator, "auto");
  EXPECT_EQ(d.rendezvous, "auto");
  EXPECT_EQ(d.grad_reduce, "average");
  // Written into the run directory's config.toml, so a resumed run reduces the same way.
  auto back = train::parse_train_config(train::to_toml(c), "config.toml", {});
  EXPECT_EQ(back.grad_reduce, "sum");
  EXPECT_EQ(back.rendezvous, "file:/shared/rdv");
}

TEST(CommConfig, ErrorsNameTheKeyAndTheFix) {
  std::string e = config_error("[parallel]\ncommunicator = \"nccl\"\n");
  EXPECT_NE(e.find("needs train.device = \"cuda\""), std::string::npos) << e;
  EXPECT_NE(e.find("test.toml"), std::string::npos) << e;
  e = config_error("[parallel]\ncommunicator = \"gloo\"\n");
  EXPECT_NE(e.find("auto, mpi, tcp, nccl, none"), std::string::npos) << e;
  e = config_error("[parallel]\ngrad_reduce = \"mean\"\n");
  EXPECT_NE(e.find("average, sum"), std::string::npos) << e;
  e = config_error("[parallel]\nrendezvous = \"gloo://node1:29500\"\n");
  EXPECT_NE(e.find("parallel.rendezvous"), std::string::npos) << e;
  EXPECT_NE(e.find("file:/shared/path"), std::string::npos) << e;
  EXPECT_NE(e.find("tcp://host:port"), std::string::npos) << e;
  e = config_error("[parallel]\nrendezvous = \"tcp://node1\"\n");
  EXPECT_NE(e.find("names no host and port"), std::string::npos) << e;
  EXPECT_EQ(config_error("[parallel]\nrendezvous = \"tcp://node1:29500\"\n"), "");
}

TEST(CommConfig, ZeroStageAndBuckets) {
  auto c = train::parse_train_config(
      "[train]\ndevice = \"cuda\"\nprecision = \"bf16\"\n[parallel]\nzero_stage = 1\n"
      "overlap = false\nbucket_mib = 50\n", "t.toml", {});
  EXPECT_EQ(c.zero_stage, 1);
  EXPECT_FALSE(c.overlap);
  EXPECT_DOUBLE_EQ(c.bucket_mib, 50.0);
  auto back = train::parse_train_config(train::to_toml(c), "config.toml", {});
  EXPECT_EQ(back.zero_stage, 1);
  EXPECT_FALSE(back.overlap);
  auto d = train::parse_train_config("", "t.toml", {});
  EXPECT_EQ(d.zero_stage, 0);
  EXPECT_TRUE(d.overlap);
  // ZeRO-1 on CPU ranks wraps plain data parallelism: with tensor parallelism it is
  // refused, naming the stage that runs there.
  EXPECT_EQ(train::parse_train_config("[parallel]\nzero_stage = 1\n", "t.toml", {}).zero_stage, 1);
  std::string e = config_error("[model]\npreset = \"gpt-tiny\"\n[train]\nseq_len = 32\n[parallel]\nzero_stage = 1\ntensor_parallel = 2\n");
  EXPECT_NE(e.find("parallel.zero_stage = 1"), std::string::npos) << e;
  EXPECT_NE(e.find("parallel.zero_stage = 2"), std::string::npos) << e;
  // The optimizer offload belongs to GPU ZeRO-3.
  e = config_error("[train]\ndevice = \"cuda\"\nprecision = \"bf16\"\n[parallel]\noffload_optimizer = true\n");
  EXPECT_NE(e.find("parallel.zero_stage = 3"), std::string::npos) << e;
  e = config_error("[train]\ndevice = \"cuda\"\nprecision = \"bf16\"\n[parallel]\nzero_stage = 3\n"
                   "grad_transport = \"copy-engine\"\n");
  EXPECT_NE(e.find("parallel.grad_transport = \"nccl\""), std::string::npos) << e;
  // GPU ranks run ZeRO stages 0 to 3; ZeRO-2, like ZeRO-3, reduces fp32 gradients over NCCL.
  EXPECT_EQ(train::parse_train_config("[train]\ndevice = \"cuda\"\nprecision = \"bf16\"\n[parallel]\n"
                                      "zero_stage = 2\n", "t.toml", {}).zero_stage, 2);
  e = config_error("[train]\ndevice = \"cuda\"\nprecision = \"bf16\"\n[parallel]\nzero_stage = 2\n"
                   "grad_comm = \"bf16\"\n");
  EXPECT_NE(e.find("parallel.zero_stage = 2"), std::string::npos) << e;
  EXPECT_NE(e.find("parallel.grad_comm = \"fp32\""), std::string::npos) << e;
  EXPECT_EQ(train::parse_train_config("[train]\ndevice = \"cuda\"\nprecision = \"bf16\"\n[parallel]\n"
                                      "zero_stage = 3\n", "t.toml", {}).zero_stage, 3);
  e = config_error("[parallel]\nbucket_mib = 0\n");
  EXPECT_NE(e.find("parallel.bucket_mib"), std::string::npos) << e;
  e = config_error("[parallel]\ngrad_comm = \"bf16\"\n");
  EXPECT_NE(e.find("parallel.grad_comm = \"bf16\""), std::string::npos) << e;
  e = config_error("[parallel]\ngrad_comm = \"fp8\"\n");
  EXPECT_NE(e.find("fp32, bf16"), std::string::npos) << e;
  auto g = train::parse_train_config(
      "[train]\ndevice = \"cuda\"\nprecision = \"bf16\"\n[parallel]\ngrad_comm = \"bf16\"\n", "t.toml", {});
  EXPECT_EQ(train::parse_train_config(train::to_toml(g), "config.toml", {}).grad_comm, "bf16");
}

// parallel.grad_transport: auto (default), nccl or copy-engine, which needs GPU ranks (with
// or without ZeRO-1); it survives the run's config.toml. "auto" is handed to the model
// unless an all-reduce of aiscale's own sums the buckets (then NCCL carries them).
TEST(CommOptions, GradTransportKey) {
  const train::TrainConfig d = train::parse_train_config("", "t.toml", {});
  EXPECT_EQ(d.grad_transport, "auto");
  EXPECT_EQ(train::grad_transport_of(d), "auto");
  auto ring = train::parse_train_config(
      "[train]\ndevice = \"cuda\"\nprecision = \"bf16\"\n[parallel]\nallreduce = \"ring\"\n",
      "t.toml", {});
  EXPECT_EQ(train::grad_transport_of(ring), "nccl");
  // auto beside every layout copy-engine is refused with: ZeRO-3 on GPUs.
  EXPECT_EQ(train::parse_train_config("[train]\ndevice = \"cuda\"\nprecision = \"bf16\"\n[parallel]\n"
                                      "zero_stage = 3\n", "t.toml", {}).grad_transport, "auto");
  auto g = train::parse_train_config(
      "[train]\ndevice = \"cuda\"\nprecision = \"bf16\"\n[parallel]\ngrad_transport = \"copy-engine\"\n",
      "t.toml", {});
  EXPECT_EQ(g.grad_transport, "copy-engine");
  EXPECT_EQ(train::parse_train_config(train::to_toml(g), "config.toml", {}).grad_transport, "copy-engine");
  std::string e = config_error("[parallel]\ngrad_transport = \"copy-engine\"\n");
  EXPECT_NE(e.find("parallel.grad_transport = \"copy-engine\""), std::string::npos) << e;
  EXPECT_NE(e.find("train.device = \"cuda\""), std::string::npos) << e;
  EXPECT_EQ(train::parse_train_config("[train]\ndevice = \"cuda\"\nprecision = \"bf16\"\n"
                                       "[parallel]\ngrad_transport = \"copy-engine\"\nzero_stage = 1\n",
                                       "t.toml", {})
                .zero_stage,
            1);
  e = config_error("[parallel]\ngrad_transport = \"ipc\"\n");
  EXPECT_NE(e.find("grad_transport"), std::string::npos) << e;
}

// A model asked for ZeRO-1 over a communicator without a device stream (MPI) refuses.
TEST(CommFactory, ZeroOneNeedsADeviceCommunicator) {
  FakeRanks comm(2, "mpi", false);
  nn::GptRunOptions o;
  o.comm = &comm;
  o.zero_stage = 1;
  std::string e = error_of([&] { nn::make_gpt("cpu", nn::gpt_preset("gpt-tiny"), o); });
  EXPECT_NE(e.find("ZeRO-1"), std::string::npos) << e;
  EXPECT_NE(e.find("nccl"), std::string::npos) << e;
  o.zero_stage = 0;
  o.grad_comm = DType::bf16;
  e = error_of([&] { nn::make_gpt("cpu", nn::gpt_preset("gpt-tiny"), o); });
  EXPECT_NE(e.find("grad_comm"), std::string::npos) << e;
  o.grad_comm = DType::f32;
  o.grad_transport = "copy-engine";
  e = error_of([&] { nn::make_gpt("cpu", nn::gpt_preset("gpt-tiny"), o); });
  EXPECT_NE(e.find("grad_transport"), std::string::npos) << e;
  EXPECT_NE(e.find("mpi"), std::string::npos) << e;
  o.grad_transport = "nccl";
  // Without ZeRO the CPU model leaves gradient synchronisation to the trainer.
  auto m = nn::make_gpt("cpu", nn::gpt_preset("gpt-tiny"), o);
  EXPECT_FALSE(m->data_parallel());
  e = error_of([&] { comm.allreduce_sum_after(nullptr, 1, DType::f32, nullptr); });
  EXPECT_NE(e.find("no device stream"), std::string::npos) << e;
}

// GPU ranks over MPI or TCP stage their device collectives through host memory (a device
// stream, collectives not on the device): ZeRO 1 to 3 and bf16 gradients get past make_gpt's
// checks (on to the GPU model, which a build without CUDA or a host without a GPU refuses
// for its own reason); the copy-engine transport is refused, naming the communicator and
// the fix.
TEST(CommFactory, StagedGpuRanksRunEveryLayoutButTheCopyEngines) {
  FakeRanks comm(2, "mpi+host-staging", /*device=*/true, /*on_device=*/false);
  nn::GptRunOptions o;
  o.comm = &comm;
  o.grad_transport = "copy-engine";
  std::string e = error_of([&] { nn::make_gpt("cuda", nn::gpt_preset("gpt-tiny"), o); });
  EXPECT_NE(e.find("parallel.grad_transport = \"copy-engine\""), std::string::npos) << e;
  EXPECT_NE(e.find("mpi+host-staging"), std::string::npos) << e;
  EXPECT_NE(e.find("parallel.grad_transport = \"nccl\""), std::string::npos) << e;
  if (nn::cuda_available()) return;  // a GPU would build the model on the fake communicator
  // NCCL ranks may take the copy engines (the same check, another verdict).
  FakeRanks nccl(2, "nccl", true);
  o.comm = &nccl;
  e = error_of([&] { nn::make_gpt("cuda", nn::gpt_preset("gpt-tiny"), o); });
  EXPECT_EQ(e.find("parallel.grad_transport"), std::string::npos) << e;
  o.comm = &comm;
  o.grad_transport = "auto";
  for (int zero = 0; zero <= 3; ++zero)
    for (DType t : {DType::f32, DType::bf16}) {
      if (zero >= 2 && t == DType::bf16) continue;  // ZeRO-2/3 reduce fp32 on any communicator
      o.zero_stage = zero;
      o.grad_comm = t;
      e = error_of([&] { nn::make_gpt("cuda", nn::gpt_preset("gpt-tiny"), o); });
      EXPECT_TRUE(e.find("without CUDA") != std::string::npos ||
                  e.find("no CUDA GPU") != std::string::npos)
          << "ZeRO " << zero << ", " << dtype_name(t) << ": " << e;
    }
}

// ZeRO-1's shard boundaries need world <= n_embd + 1: a larger job is refused before any
// GPU work (the check precedes the CUDA model), naming both numbers.
TEST(CommFactory, ZeroOneRefusesMoreRanksThanItCanShard) {
  FakeRanks comm(1000, "nccl", true);
  nn::GptRunOptions o;
  o.comm = &comm;
  o.zero_stage = 1;
  const nn::GptConfig c = nn::gpt_preset("gpt-tiny");
  std::string e = error_of([&] { nn::make_gpt("cuda", c, o); });
  EXPECT_NE(e.find("at most n_embd + 1 = " + std::to_string(c.n_embd + 1) + " ranks"), std::string::npos) << e;
  EXPECT_NE(e.find("1000"), std::string::npos) << e;
}

TEST(CommFactory, Errors) {
  parallel::CommOptions o;
  o.kind = "nccl";
  o.device = "cpu";
  std::string e = error_of([&] { parallel::make_communicator(o); });
  EXPECT_NE(e.find("needs train.device = \"cuda\""), std::string::npos) << e;
  o.kind = "gloo";
  e = error_of([&] { parallel::make_communicator(o); });
  EXPECT_NE(e.find("unknown communicator 'gloo'"), std::string::npos) << e;
  if (!parallel::nccl_compiled()) {
    o.kind = "nccl";
    o.device = "cuda";
    e = error_of([&] { parallel::make_communicator(o); });
    EXPECT_NE(e.find("built without NCCL"), std::string::npos) << e;
  }
  // One process, "auto": no communication at all, whatever the device.
  o.kind = "auto";
  o.device = "cuda";
  if (parallel::launched_world_size() == 1) {
    EXPECT_EQ(parallel::make_communicator(o)->backend(), "none");
  }
}

TEST(AllreduceBench, Sizes) {
  bench::AllreduceBenchOptions o;
  auto s = bench::allreduce_bench_sizes(o);
  ASSERT_EQ(s.size(), 28u);  // 8 B .. 1 GiB, doubling
  EXPECT_EQ(s.front(), 8);
  EXPECT_EQ(s.back(), int64_t{1} << 30);
  o.step_factor = 4;
  s = bench::allreduce_bench_sizes(o);
  EXPECT_EQ(s.size(), 14u);  // 8, 32, ..., 512 MiB
  EXPECT_EQ(s.back(), int64_t{1} << 29);
  o.min_bytes = 6;  // rounded down to whole fp32 values
  o.max_bytes = 100;
  s = bench::allreduce_bench_sizes(o);
  EXPECT_EQ(s, (std::vector<int64_t>{4, 24, 96}));
}

TEST(AllreduceBench, CommandLineErrors) {
  auto r = run_aiscale("bench allreduce --backend mpi --min-bytes 64 --max-bytes 8");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--max-bytes 8 is below --min-bytes 64"), std::string::npos) << r.output;
  r = run_aiscale("bench allreduce --backend mpi --step-factor 1");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--step-factor: '1' is too small: give a whole number between 2 and 1024"), std::string::npos) << r.output;
  r = run_aiscale("bench allreduce --backend gloo");
  EXPECT_NE(r.exit_code, 0);
  if (!parallel::nccl_compiled()) {
    r = run_aiscale("bench allreduce --backend nccl --max-bytes 64");
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.output.find("built without NCCL"), std::string::npos) << r.output;
  }
}

// CPU ranks launched torchrun-style (RANK/WORLD_SIZE, no mpirun) talk TCP: rank 1 alone
// looks for rank 0's store (MASTER_PORT, there being no torchrun agent) and says where it
// looked; parallel.communicator = "mpi" is refused naming "tcp".
TEST(CommFactory, TorchrunStyleCpuRanksTalkTcp) {
  auto dir = temp_dir("torchrun-cpu");
  write_byte_shards(dir, 4000, 1000);
  const std::string cfg = tiny_config(dir);
  const std::string env = "env -u OMPI_COMM_WORLD_SIZE -u PMI_SIZE -u PMIX_RANK -u SLURM_NTASKS "
                          "RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=9";
  auto r = run_aiscale("train -q -c " + cfg + " --set train.steps=3 parallel.timeout_s=1", env);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("could not reach the TCP store at 127.0.0.1:9"), std::string::npos) << r.output;
  r = run_aiscale("train -q -c " + cfg + " --set train.steps=3 parallel.communicator=mpi", env);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("rank 1 of 2 through RANK/WORLD_SIZE"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("parallel.communicator = \"auto\" or \"tcp\""), std::string::npos) << r.output;
}