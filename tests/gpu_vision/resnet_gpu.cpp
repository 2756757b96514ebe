// The GPU ResNet against the CPU model: loss, top-k counts, every parameter gradient, and
// three SGD steps (parameters, momentum, running statistics) in fp32 for the small ResNet,
// ResNet-18 and ResNet-50 (per-tensor gradients within 5e-3: cuDNN may pick Winograd or
// FFT algorithms, whose fp32 rounding differs from a direct convolution's); bf16 AMP
// within its rounding; `bench vision --device cuda` and `train`
// with train.device = "cuda" end to end.
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../support/run_support.h"
#include "aiscale/nn/models/resnet.h"
#include "aiscale/nn/models/resnet_cuda.h"
#include "aiscale/optim/sgd.h"
#include "aiscale/parallel/bootstrap.h"
#include "gpu_vision_support.h"

namespace aiscale::gpu_vision {
namespace {

using namespace testsupport;

struct Case {
  std::string preset;
  int64_t channels, size, batch;
};

nn::ResNetConfig config_of(const Case& k) {
  nn::ResNetConfig c = nn::resnet_preset(k.preset);
  c.in_channels = k.channels;
  c.image_size = k.size;
  c.num_classes = 10;
  return c;
}

std::vector<float> slice(const std::vector<float>& v, const nn::ResNetTensor& t) {
  return {v.begin() + t.offset, v.begin() + t.offset + t.size};
}

// Tolerances: the loss (relative), each gradient tensor's and the whole gradient's relative
// L2 error (tensor_tol 0: not per tensor), the parameters' after three steps.
void compare_with_cpu(const Case& k, const std::string& precision, double loss_tol,
                      double tensor_tol, double total_tol, double param_tol,
                      const std::string& batchnorm = "own") {
  const nn::ResNetConfig cfg = config_of(k);
  nn::ResNetOptions mo;
  mo.max_batch = k.batch;
  mo.seed = 5;
  mo.label_smoothing = 0.1f;
  nn::ResNet cpu(cfg, mo, ops::vision::vision_cpu_backend());
  nn::ResNetOptions mirror_options = mo;
  mirror_options.max_batch = 0;
  nn::ResNet mirror(cfg, mirror_options, ops::vision::vision_cpu_backend());
  ASSERT_EQ(mirror.params(), cpu.params());

  nn::ResNetCudaOptions go;
  go.max_batch = k.batch;
  go.precision = precision;
  go.momentum = 0.9;
  go.nesterov = true;
  go.weight_decay = 1e-3;
  go.batchnorm = batchnorm;
  nn::ResNetCuda gpu(mirror, go);
  std::vector<uint8_t> decay(cpu.num_parameters(), 0);
  for (const nn::ResNetTensor& t : cpu.parameter_tensors())
    std::fill(decay.begin() + t.offset, decay.begin() + t.offset + t.size, t.decay ? 1 : 0);
  optim::Sgd sgd(cpu.num_parameters(), {0.9, true, 1e-3}, decay);

  Rng rng(11);
  const std::vector<float> images =
      random_vector(rng, size_t(k.batch * k.channels * k.size * k.size));
  std::vector<int32_t> labels(k.batch);
  for (int32_t& l : labels) l = int32_t(rng.below(10));
  for (int step = 0; step < 3; ++step) {
    const double lc = cpu.forward(images.data(), labels.data(), k.batch, true);
    cpu.zero_grad();
    cpu.backward();
    const double lg = gpu.forward(images.data(), labels.data(), k.batch, true);
    gpu.zero_grad();
    gpu.backward();
    EXPECT_NEAR(lg, lc, loss_tol * std::max(1.0, std::abs(lc))) << k.preset << " step " << step;
    if (step == 0) {
      int64_t c1 = 0, c5 = 0, g1 = 0, g5 = 0;
      cpu.count_correct(labels.data(), k.batch, c1, c5);
      gpu.count_correct(g1, g5);
      if (precision == "fp32") {
        EXPECT_EQ(g1, c1);
        EXPECT_EQ(g5, c5);
      }
      const std::vector<float> grads = gpu.gradients();
      if (tensor_tol > 0) {
        for (const nn::ResNetTensor& t : cpu.parameter_tensors())
          EXPECT_LT(relative_error(slice(grads, t), slice(cpu.grads(), t)), tensor_tol)
              << k.preset << " " << t.name;
      }
      EXPECT_LT(relative_error(grads, cpu.grads()), total_tol) << k.preset;
    }
    sgd.step(cpu.params().data(), cpu.grads().data(), 0.05);
    gpu.sgd_step(0.05);
  }
  std::vector<float> velocity;
  gpu.download(mirror, &velocity);
  EXPECT_LT(relative_error(mirror.params(), cpu.params()), param_tol) << k.preset;
  EXPECT_LT(relative_error(velocity, sgd.velocity()), 2 * total_tol) << k.preset;
  EXPECT_LT(relative_error(mirror.buffers(), cpu.buffers()), 10 * param_tol) << k.preset;
}

TEST(ResNetGpu, SmallResNetMatchesTheCpuModelInFp32) {
  compare_with_cpu({"resnet-small", 1, 12, 4}, "fp32", 1e-4, 5e-3, 1e-3, 5e-5);
}

TEST(ResNetGpu, ResNet18MatchesTheCpuModelInFp32) {
  compare_with_cpu({"resnet18", 3, 64, 4}, "fp32", 1e-4, 5e-3, 1e-3, 5e-5);
}

TEST(ResNetGpu, ResNet50MatchesTheCpuModelInFp32) {
  compare_with_cpu({"resnet50", 3, 64, 2}, "fp32", 1e-4, 5e-3, 1e-3, 5e-5);
}

TEST(ResNetGpu, Bf16AmpStaysCloseToTheCpuModel) {
  // Only the whole gradient vector is held: 16-bit activations round every layer.
  compare_with_cpu({"resnet-small", 1, 12, 8}, "bf16", 3e-2, 0, 0.1, 1e-2);
}

TEST(ResNetGpu, Fp16AmpStaysCloseToTheCpuModel) {
  compare_with_cpu({"resnet-small", 1, 12, 8}, "fp16", 1e-2, 0, 0.05, 1e-2);
}

// cuDNN's fused batch norm (where it takes the layers: NHWC 16-bit) against the CPU model.
TEST(ResNetGpu, CudnnBatchNormStaysCloseToTheCpuModel) {
  compare_with_cpu({"resnet18", 3, 64, 4}, "fp16", 1e-2, 0, 0.05, 1e-2, "cudnn");
  compare_with_cpu({"resnet18", 3, 64, 4}, "bf16", 3e-2, 0, 0.1, 1e-2, "cudnn");
  compare_with_cpu({"resnet18", 3, 64, 4}, "fp32", 1e-4, 5e-3, 1e-3, 5e-5, "cudnn");
}

TEST(ResNetGpu, CheckpointLayoutRoundTrips) {
  const nn::ResNetConfig cfg = config_of({"resnet18", 3, 32, 2});
  nn::ResNetOptions mo;
  mo.max_batch = 0;
  mo.seed = 9;
  nn::ResNet host(cfg, mo, ops::vision::vision_cpu_backend());
  nn::ResNetCudaOptions go;
  go.max_batch = 2;
  nn::ResNetCuda gpu(host, go);
  const std::vector<float> before = host.params();
  std::vector<float> velocity(before.size());
  for (size_t i = 0; i < velocity.size(); ++i) velocity[i] = float(i % 97) * 0.01f;
  gpu.upload(host, &velocity);
  std::vector<float> back;
  std::fill(host.params().begin(), host.params().end(), 0.0f);
  gpu.download(host, &back);
  EXPECT_EQ(host.params(), before);
  EXPECT_EQ(back, velocity);
}

TEST(ResNetGpu, BenchVisionReportsTheGpuRun) {
  for (const std::string precision : {"bf16", "fp32"}) {
    const RunOutput r = run_aiscale("bench vision --device cuda --model resnet50 --steps 3 "
                                    "--warmup 1 --batch-size 32 --precision " + precision);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto j = nlohmann::json::parse(r.output.substr(r.output.find('{')));
    EXPECT_EQ(j["device"], "cuda");
    EXPECT_EQ(j["precision"], precision);
    EXPECT_EQ(j["batch_size"], 32);
    EXPECT_GT(j["images_per_s"].get<double>(), 0);
    EXPECT_TRUE(std::isfinite(j["final_loss"].get<double>()));
    EXPECT_GT(j["peak_memory_bytes"].get<double>(), 0);
  }
}

TEST(ResNetGpu, TrainOnCudaLearnsAndResumes) {
  const fs::path dir = temp_dir("vision-train-gpu");
  const fs::path cfg = dir / "gpu.toml";
  std::ofstream(cfg) << "[model]\nkind = \"resnet\"\npreset = \"resnet-small\"\nimage_size = 8\n"
                     << "[data]\nkind = \"synthetic\"\nsynthetic_images = 256\n"
                     << "synthetic_channels = 1\nsynthetic_classes = 4\n"
                     << "[train]\ndevice = \"cuda\"\nprecision = \"bf16\"\nbatch_size = 16\n"
                     << "steps = 24\nlr = 0.8\nwarmup_epochs = 0.25\nnesterov = true\n"
                     << "log_every = 1\n"
                     << "[run]\ndir = \"" << dir.string() << "\"\nname = \"gpu\"\n"
                     << "checkpoint_every = 10\n";
  const RunOutput r = run_aiscale("train -q -c " + cfg.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const fs::path run = dir / "gpu";
  const auto summary = nlohmann::json::parse(std::ifstream(run / "summary.json"));
  EXPECT_EQ(summary["device"], "cuda");
  EXPECT_EQ(summary["precision"], "bf16");
  EXPECT_LT(summary["final_loss"].get<double>(), 0.5 * summary["first_loss"].get<double>());
  EXPECT_GE(summary["val_top1"].get<double>(), 0.8);
  const auto metrics = read_metrics(run);
  fs::remove_all(run / "checkpoints/step_00000024");
  const RunOutput again = run_aiscale("train -q --resume " + run.string());
  ASSERT_EQ(again.exit_code, 0) << again.output;
  const auto resumed = read_metrics(run);
  ASSERT_GE(resumed.size(), 24u);
  for (size_t i = 20; i < 24; ++i)
    EXPECT_NEAR(resumed[i]["loss"].get<double>(), metrics[i]["loss"].get<double>(), 1e-2)
        << "step " << i + 1;
}

// Two GPU ranks over NCCL: the bucketed all-reduce during the backward gives the losses of
// one all-reduce after it (the same sums, in other chunks; cuDNN's timed algorithm choice
// may differ between the runs, hence the tolerance).
TEST(ResNetGpu, TwoRanksOverlappedAllReduceMatchesTheSerialOne) {
  if (parallel::cuda_visible_gpus() < 2) GTEST_SKIP() << "needs 2 GPUs";
  const fs::path dir = temp_dir("vision-ddp-gpu");
  const fs::path cfg = dir / "ddp.toml";
  std::ofstream(cfg) << "[model]\nkind = \"resnet\"\npreset = \"resnet18\"\nimage_size = 32\n"
                     << "[data]\nkind = \"synthetic\"\nsynthetic_images = 512\n"
                     << "synthetic_channels = 3\nsynthetic_classes = 10\n"
                     << "[train]\ndevice = \"cuda\"\nbatch_size = 16\nsteps = 6\nlr = 0.2\n"
                     << "log_every = 1\n"
                     << "[run]\ndir = \"" << dir.string() << "\"\n";
  const std::string launch = "launch -n 2 --threads-per-rank 4 -- train -q -c " + cfg.string();
  const RunOutput a = run_aiscale(launch + " --set run.name=overlap");
  ASSERT_EQ(a.exit_code, 0) << a.output;
  const RunOutput b = run_aiscale(launch + " --set run.name=serial parallel.overlap_allreduce=false");
  ASSERT_EQ(b.exit_code, 0) << b.output;
  const auto ma = read_metrics(dir / "overlap"), mb = read_metrics(dir / "serial");
  ASSERT_EQ(ma.size(), mb.size());
  ASSERT_GE(ma.size(), 6u);
  for (size_t i = 0; i < 6; ++i)
    EXPECT_NEAR(ma[i]["loss"].get<double>(), mb[i]["loss"].get<double>(),
                1e-3 * std::max(1.0, mb[i]["loss"].get<double>()))
        << "step " << i + 1;
  const auto summary = nlohmann::json::parse(std::ifstream(dir / "overlap" / "summary.json"));
  EXPECT_EQ(summary["world_size"], 2);
}

}  // namespace
}  // namespace aiscale::gpu_vision
