// The data-parallel wrappers outside the model (optim/data_parallel.h) over
// 2 MPI ranks, for both models through the one trainer: a GPT on token shards and a ResNet
// on Fashion-MNIST-format IDX files each train under DDP and under ZeRO-1, and
//  - every run's losses equal one rank's with the global batch (the tolerances below);
//  - every run went through the trainer's wrapper (metrics.jsonl names it: "ddp", "zero1");
//  - ZeRO-1's optimizer state on each rank (steps.jsonl's optimizer_state event, the bytes
//    the wrapper's optimizer holds) is half of DDP's.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>

#include "../data/image_test_images.h"
#include "../support/run_support.h"

namespace aiscale {
namespace {

using namespace testsupport;

// Every metrics line of a step names the wrapper that trained it.
void expect_wrapper(const std::vector<nlohmann::json>& metrics, const std::string& name) {
  int steps = 0;
  for (const auto& m : metrics) {
    if (!m.contains("loss")) continue;  // a final validation line
    ++steps;
    EXPECT_EQ(m.value("data_parallel", std::string()), name) << m.dump();
  }
  EXPECT_GT(steps, 0);
}

void expect_losses_near(const std::vector<nlohmann::json>& want, const std::vector<nlohmann::json>& got,
                        size_t steps, double rel, const std::string& what) {
  ASSERT_GE(want.size(), steps) << what;
  ASSERT_GE(got.size(), steps) << what;
  for (size_t i = 0; i < steps; ++i) {
    const double a = want[i]["loss"], b = got[i]["loss"];
    EXPECT_NEAR(b, a, rel * std::abs(a)) << what << ", step " << i + 1;
  }
}

// ZeRO-1 keeps 1/2 of every bucket on each of 2 ranks (a bucket of odd length is padded by
// one value): each rank's state is half of DDP's, within a few values per bucket.
void expect_half(const fs::path& ddp, const fs::path& zero1) {
  const auto full = optimizer_state_bytes(ddp), half = optimizer_state_bytes(zero1);
  ASSERT_EQ(full.size(), 2u);
  ASSERT_EQ(half.size(), 2u);
  for (int r = 0; r < 2; ++r) {
    EXPECT_GT(full.at(r), 0);
    EXPECT_NEAR(half.at(r), full.at(r) / 2, 0.001 * full.at(r)) << "rank " << r;
  }
}

TEST(DataParallelWrappers, GptTrainsUnderDdpAndZeroOneLikeOneRank) {
  const fs::path dir = temp_dir("dp-wrappers-gpt");
  write_byte_shards(dir);
  const std::string config = tiny_config(dir);
  const std::string common = " --set train.steps=8 train.warmup_steps=2 train.eval_batches=1";
  const std::string launch = "launch -n 2 --threads-per-rank 1 -- train -q -c " + config + common;
  const RunOutput one = run_aiscale("train -q -c " + config + common + " train.batch_size=8 run.name=one");
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const RunOutput ddp = run_aiscale(launch + " train.batch_size=4 run.name=ddp");
  ASSERT_EQ(ddp.exit_code, 0) << ddp.output;
  const RunOutput zero1 = run_aiscale(launch + " train.batch_size=4 parallel.zero_stage=1 run.name=zero1");
  ASSERT_EQ(zero1.exit_code, 0) << zero1.output;
  const auto m1 = read_metrics(dir / "runs/one"), md = read_metrics(dir / "runs/ddp"),
             mz = read_metrics(dir / "runs/zero1");
  // 2 ranks x 4 rows against 1 rank x 8: only the order of fp32 additions differs (two
  // means over 4 rows summed vs one over 8, ~1e-7 relative per step), and AdamW's
  // normalised update keeps that from growing much over 8 steps: 1e-4 relative. ZeRO-1 sums
  // the same two gradients (a reduce-scatter instead of an all-reduce) and updates the same
  // values; only the gradient norm is summed in another order (shards, then ranks), which
  // moves the clipping factor in its last bits: the same 1e-4.
  expect_losses_near(m1, md, 8, 1e-4, "ddp");
  expect_losses_near(m1, mz, 8, 1e-4, "zero1");
  expect_losses_near(md, mz, 8, 1e-5, "zero1 against ddp");
  expect_wrapper(m1, "ddp");
  expect_wrapper(md, "ddp");
  expect_wrapper(mz, "zero1");
  // AdamW's two moments: 8 bytes a parameter on every DDP rank, half of that with ZeRO-1.
  const auto summary = nlohmann::json::parse(std::ifstream(dir / "runs/ddp/summary.json"));
  EXPECT_EQ(optimizer_state_bytes(dir / "runs/ddp").at(0), 8.0 * summary["n_params"].get<double>());
  expect_half(dir / "runs/ddp", dir / "runs/zero1");
  EXPECT_EQ(nlohmann::json::parse(std::ifstream(dir / "runs/zero1/summary.json"))["communication"]["data_parallel"],
            "zero1");
}

// 256 Fashion-MNIST-format images (IDX, 12x12 grey, 10 classes): class k is a bright band
// at row k plus noise, learnable in a few steps.
void write_fashion_idx(const fs::path& dir, const std::string& stem, int64_t count, int64_t seed) {
  data::ImageArray a;
  a.count = count;
  a.height = a.width = 12;
  a.channels = 1;
  uint64_t x = static_cast<uint64_t>(seed) * 2654435761u + 1;
  for (int64_t i = 0; i < count; ++i) {
    const int label = static_cast<int>(i % 10);
    a.labels.push_back(label);
    for (int64_t p = 0; p < 144; ++p) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      const int noise = static_cast<int>((x >> 33) % 40);
      a.pixels.push_back(static_cast<uint8_t>((p / 12 == label ? 200 : 20) + noise));
    }
  }
  data::test_images::write_idx(dir / (stem + "-images-idx3-ubyte"), dir / (stem + "-labels-idx1-ubyte"), a);
}

std::string resnet_config(const fs::path& dir, const std::string& name, int64_t batch, int zero_stage) {
  const fs::path path = dir / (name + ".toml");
  std::ofstream(path) << "[model]\nkind = \"resnet\"\npreset = \"resnet-small\"\n"
                      << "blocks_per_stage = 1\n"
                      << "[data]\nkind = \"idx\"\ntrain = \"" << (dir / "train-images-idx3-ubyte").string()
                      << "\"\nval = \"" << (dir / "t10k-images-idx3-ubyte").string()
                      << "\"\naugment = \"none\"\n"
                      << "[train]\nbatch_size = " << batch << "\nsteps = 10\nlr = 0.4\n"
                      << "lr_scaling = \"none\"\nnesterov = true\nweight_decay = 5e-4\nthreads = 1\n"
                      << "log_every = 1\neval_batches = 2\n"
                      << "[parallel]\nsync_batchnorm = true\nzero_stage = " << zero_stage << "\n"
                      << "[run]\ndir = \"" << dir.string() << "\"\nname = \"" << name << "\"\n";
  return path.string();
}

TEST(DataParallelWrappers, ResNetTrainsUnderDdpAndZeroOneLikeOneRank) {
  const fs::path dir = temp_dir("dp-wrappers-resnet");
  write_fashion_idx(dir, "train", 256, 1);
  write_fashion_idx(dir, "t10k", 64, 2);
  const std::string env = "OMP_WAIT_POLICY=passive";
  const std::string launch = "launch -n 2 --threads-per-rank 1 -- train -q -c ";
  const RunOutput one = run_aiscale("train -q -c " + resnet_config(dir, "one", 16, 0), env);
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const RunOutput ddp = run_aiscale(launch + resnet_config(dir, "ddp", 8, 0), env);
  ASSERT_EQ(ddp.exit_code, 0) << ddp.output;
  const RunOutput zero1 = run_aiscale(launch + resnet_config(dir, "zero1", 8, 1), env);
  ASSERT_EQ(zero1.exit_code, 0) << zero1.output;
  const auto m1 = read_metrics(dir / "one"), md = read_metrics(dir / "ddp"), mz = read_metrics(dir / "zero1");
  // With synchronised batch norm 2 ranks x 8 images compute the same batch statistics and
  // summed gradients as 1 rank x 16, up to the order of fp32 additions in the statistics'
  // and gradients' sums; SGD does not normalise, so these differences grow with the steps:
  // 2e-3 relative over 10 steps (the tolerance of the vision DDP test). DDP and ZeRO-1 on
  // the same 2 ranks sum the same two gradients (a + b either way) and apply the same SGD
  // arithmetic to each value: 1e-6.
  expect_losses_near(m1, md, 10, 2e-3, "ddp");
  expect_losses_near(m1, mz, 10, 2e-3, "zero1");
  expect_losses_near(md, mz, 10, 1e-6, "zero1 against ddp");
  EXPECT_LT(md[9]["loss"].get<double>(), md[0]["loss"].get<double>());
  expect_wrapper(m1, "ddp");
  expect_wrapper(md, "ddp");
  expect_wrapper(mz, "zero1");
  // SGD's momentum: 4 bytes a parameter on every DDP rank, half of that with ZeRO-1.
  const auto summary = nlohmann::json::parse(std::ifstream(dir / "ddp/summary.json"));
  EXPECT_EQ(optimizer_state_bytes(dir / "ddp").at(1), 4.0 * summary["parameters"].get<double>());
  expect_half(dir / "ddp", dir / "zero1");
  // The accuracy is the model's own metric, computed by the same loop for both wrappers.
  EXPECT_TRUE(mz[0].contains("top1") && mz[0].contains("top5")) << mz[0].dump();

  // A ZeRO-1 checkpoint holds whole tensors (the momentum gathered from both ranks): a
  // resumed run repeats the uninterrupted run's last steps.
  const std::string resumed_cfg = resnet_config(dir, "resumed", 8, 1);
  const RunOutput first = run_aiscale(launch + resumed_cfg + " --set train.steps=10 run.checkpoint_every=6",
                                      env + " AISCALE_FAULT=term@6");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const RunOutput again = run_aiscale("launch -n 2 --threads-per-rank 1 -- train -q --resume " +
                                          (dir / "resumed").string(), env);
  ASSERT_EQ(again.exit_code, 0) << again.output;
  const auto mr = read_metrics(dir / "resumed");
  for (size_t i = 6; i < 10; ++i)
    EXPECT_NEAR(mr[i]["loss"].get<double>(), mz[i]["loss"].get<double>(), 1e-6) << "step " << i + 1;
}

}  // namespace
}  // namespace aiscale
