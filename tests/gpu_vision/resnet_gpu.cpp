// The GPU ResNet against the CPU model: loss, top-k counts, every parameter gradient, and
// three SGD steps (parameters, momentum, running statistics) in fp32 for the small ResNet
// and ResNet-18 (per-tensor gradients within 5e-3: cuDNN may pick Winograd or FFT
// algorithms, whose fp32 rounding differs from a direct convolution's), one step of
// ResNet-50 against its own sensitivity; bf16 and fp16 AMP within their rounding; `bench vision --device cuda` and `train`
// with train.device = "cuda" end to end.
#include <algorithm>
#include <cmath>
#include <map>
#include <cstdlib>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../support/resnet_init.h"
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

// The CPU model's own gradient change (relative L2) when every input value and every
// parameter moves by up to `relative` (1e-6: how far fp32 rounding alone can move this
// case's gradients; a 16-bit type's unit roundoff: how far rounding the inputs and the
// weights to it, as AMP does, moves them).
double cpu_gradient_sensitivity(nn::ResNet& cpu, const std::vector<float>& images,
                                const std::vector<int32_t>& labels, int64_t batch,
                                double relative) {
  std::vector<float> moved = images;
  for (size_t i = 0; i < moved.size(); ++i)
    moved[i] *= float(1.0 + relative * testsupport::hashed_u(int64_t(i), 77));
  const std::vector<float> buffers = cpu.buffers(), params = cpu.params();
  cpu.forward(images.data(), labels.data(), batch, true);
  cpu.zero_grad();
  cpu.backward();
  const std::vector<float> g0 = cpu.grads();
  for (size_t i = 0; i < params.size(); ++i)
    cpu.params()[i] *= float(1.0 + relative * testsupport::hashed_u(int64_t(i), 78));
  cpu.forward(moved.data(), labels.data(), batch, true);
  cpu.zero_grad();
  cpu.backward();
  cpu.params() = params;
  cpu.buffers() = buffers;  // the running statistics as before the probe
  return relative_error(cpu.grads(), g0);
}

std::vector<float> minus(const std::vector<float>& a, const std::vector<float>& b) {
  std::vector<float> d(a.size());
  for (size_t i = 0; i < a.size(); ++i) d[i] = a[i] - b[i];
  return d;
}

// Tolerances: the loss (relative), each gradient tensor's and the whole gradient's relative
// L2 error at the first step (tensor_tol 0: not per tensor), then after `steps` SGD steps
// the momentum's (2 total_tol), the parameters' change from the start (2 total_tol: an
// update is a combination of gradients) and the running statistics' (param_tol). With
// calibrate_at > 0, the whole-gradient tolerance is at least 3 times the CPU model's own
// sensitivity at that relative change (cpu_gradient_sensitivity), for cases too deep for
// their batch to be well-conditioned and for AMP's rounding.
constexpr double kCompareLr = 0.005;

void compare_with_cpu(const Case& k, const std::string& precision, double loss_tol,
                      double tensor_tol, double total_tol, double param_tol,
                      const std::string& batchnorm = "own", int steps = 3,
                      double calibrate_at = 0) {
  const nn::ResNetConfig cfg = config_of(k);
  nn::ResNetOptions mo;
  mo.max_batch = k.batch;
  mo.seed = 5;
  mo.label_smoothing = 0.1f;
  nn::ResNet cpu(cfg, mo, ops::vision::vision_cpu_backend());
  // The full-rank hashed initialisation and inputs (tests/support/resnet_init.h) of the
  // PyTorch fixture's ResNet-18 case, where the fp32 CPU model agrees with an fp64
  // evaluation to ~1e-6 (docs/guide/vision.md): what is compared is the GPU path, not the
  // amplified rounding of an ill-conditioned case.
  testsupport::deterministic_init(cpu, 2);
  nn::ResNetOptions mirror_options = mo;
  mirror_options.max_batch = 0;
  nn::ResNet mirror(cfg, mirror_options, ops::vision::vision_cpu_backend());
  mirror.params() = cpu.params();
  const std::vector<float> start = cpu.params();
  nn::ResNetCudaOptions go;
  go.max_batch = k.batch;
  go.precision = precision;
  go.momentum = 0.9;
  go.nesterov = true;
  go.weight_decay = 1e-3;
  go.batchnorm = batchnorm;
  nn::ResNetCuda gpu(mirror, go);
  if (batchnorm == "cudnn") {  // the NHWC 16-bit layers are cuDNN's, fp32 keeps the own
    EXPECT_EQ(gpu.describe().find("layers cuDNN") != std::string::npos, precision != "fp32")
        << gpu.describe();
  }
  std::vector<uint8_t> decay(cpu.num_parameters(), 0);
  for (const nn::ResNetTensor& t : cpu.parameter_tensors())
    std::fill(decay.begin() + t.offset, decay.begin() + t.offset + t.size, t.decay ? 1 : 0);
  optim::Sgd sgd(cpu.num_parameters(), {0.9, true, 1e-3}, decay);

  Rng rng(11);
  std::vector<float> images(size_t(k.batch * k.channels * k.size * k.size));
  for (size_t i = 0; i < images.size(); ++i)
    images[i] = float(std::sqrt(3.0) * testsupport::hashed_u(int64_t(i), 1031));  // rms 1
  std::vector<int32_t> labels(k.batch);
  for (int32_t& l : labels) l = int32_t(rng.below(10));
  if (calibrate_at > 0) {
    const double sensitivity = cpu_gradient_sensitivity(cpu, images, labels, k.batch, calibrate_at);
    std::printf("%s %s: the CPU gradient moves by %.3g under a %.3g change of inputs and weights\n",
                k.preset.c_str(), precision.c_str(), sensitivity, calibrate_at);
    total_tol = std::max(total_tol, 3 * sensitivity);
  }
  for (int step = 0; step < steps; ++step) {
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
      const double whole = relative_error(grads, cpu.grads());
      std::printf("%s %s (%s batch norm): step-1 gradient differs by %.3g (tolerance %.3g)\n",
                  k.preset.c_str(), precision.c_str(), batchnorm.c_str(), whole, total_tol);
      EXPECT_LT(whole, total_tol) << k.preset;
    }
    // A learning rate at which the loss falls: at 0.05 ResNet-18's loss rose from 2.3 to
    // 8.2 in two steps, and in that divergence the last bits of any two evaluations
    // (CPU, or two GPU runs of cuDNN's non-deterministic kernels) grow into whole
    // differences in the batch-norm parameters' updates.
    sgd.step(cpu.params().data(), cpu.grads().data(), kCompareLr);
    gpu.sgd_step(kCompareLr);
  }
  std::vector<float> velocity;
  gpu.download(mirror, &velocity);
  const std::vector<float> moved_gpu = minus(mirror.params(), start),
                           moved_cpu = minus(cpu.params(), start);
  const double moved_err = relative_error(moved_gpu, moved_cpu),
               velocity_err = relative_error(velocity, sgd.velocity());
  EXPECT_LT(moved_err, 2 * total_tol) << k.preset;
  EXPECT_LT(velocity_err, 2 * total_tol) << k.preset;
  if (moved_err >= 2 * total_tol || velocity_err >= 2 * total_tol) {
    // Where the difference sits: the tensors whose change or momentum differs most.
    std::vector<std::pair<double, std::string>> worst;
    for (const nn::ResNetTensor& t : cpu.parameter_tensors())
      worst.emplace_back(std::max(relative_error(slice(moved_gpu, t), slice(moved_cpu, t)),
                                  relative_error(slice(velocity, t), slice(sgd.velocity(), t))),
                         t.name);
    std::sort(worst.rbegin(), worst.rend());
    for (size_t i = 0; i < std::min<size_t>(5, worst.size()); ++i)
      std::printf("%s: %s differs by %.3g after %d steps\n", k.preset.c_str(),
                  worst[i].second.c_str(), worst[i].first, steps);
  }
  EXPECT_LT(relative_error(mirror.buffers(), cpu.buffers()), 10 * param_tol) << k.preset;
}

TEST(ResNetGpu, SmallResNetMatchesTheCpuModelInFp32) {
  compare_with_cpu({"resnet-small", 1, 12, 4}, "fp32", 1e-4, 5e-3, 1e-3, 5e-5);
}

// The PyTorch fixture's ResNet-18 case (3x64x64, batch 8, hashed initialisation and
// inputs): well-conditioned, a 1e-6 input change moves the CPU gradient by 4e-6.
TEST(ResNetGpu, ResNet18MatchesTheCpuModelInFp32) {
  compare_with_cpu({"resnet18", 3, 64, 8}, "fp32", 1e-4, 5e-3, 1e-3, 5e-5);
}

// ResNet-50 at 3x64x64 has 2x2 maps in layer4 and batch norms over 8 values at batch 2:
// a 1e-6 input change moves the CPU gradient by 1.7e-2 (2.4e-2 with the model's own
// random initialisation; measured on the CPU, 2026-11-27), so no two fp32 implementations
// agree per tensor, and SGD steps from there diverge. One step: the loss, the top-k
// counts and the whole gradient within 3 times the CPU model's own sensitivity (its
// inputs and weights moved by 1e-6).
TEST(ResNetGpu, ResNet50MatchesTheCpuModelInFp32) {
  compare_with_cpu({"resnet50", 3, 64, 2}, "fp32", 1e-4, 0, 1e-3, 5e-5, "own", 1, 1e-6);
}

// AMP: only the whole gradient vector is held, 16-bit activations and activation
// gradients round every layer (as autocast does; the batch-norm statistics, dgamma and
// dbeta, the classifier's weight gradients, the loss and the master weights stay fp32).
// How far that rounding may move the gradients is the CPU model's own answer: each case is
// held to 3 times the change of the fp32 CPU gradient when its inputs and weights move by
// the 16-bit type's unit roundoff (bf16 2^-8, fp16 2^-11), or to the fixed bound if larger.
constexpr double kBf16Roundoff = 1.0 / 256, kFp16Roundoff = 1.0 / 2048;

TEST(ResNetGpu, Bf16AmpStaysCloseToTheCpuModel) {
  compare_with_cpu({"resnet-small", 1, 12, 8}, "bf16", 3e-2, 0, 0.1, 1e-2, "own", 3, kBf16Roundoff);
}

TEST(ResNetGpu, Fp16AmpStaysCloseToTheCpuModel) {
  compare_with_cpu({"resnet-small", 1, 12, 8}, "fp16", 1e-2, 0, 0.05, 1e-2, "own", 3, kFp16Roundoff);
}

// cuDNN's fused batch norm (where it takes the layers: NHWC 16-bit) against the CPU model.
TEST(ResNetGpu, CudnnBatchNormStaysCloseToTheCpuModel) {
  compare_with_cpu({"resnet18", 3, 64, 8}, "fp16", 1e-2, 0, 0.05, 1e-2, "cudnn", 3, kFp16Roundoff);
  compare_with_cpu({"resnet18", 3, 64, 8}, "bf16", 3e-2, 0, 0.1, 1e-2, "cudnn", 3, kBf16Roundoff);
  // fp32 keeps the own kernels (resnet_cuda.cpp says why): the exact comparison holds.
  compare_with_cpu({"resnet18", 3, 64, 8}, "fp32", 1e-4, 5e-3, 1e-3, 5e-5, "cudnn");
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

// Two GPU ranks: over NCCL on two GPUs; where one GPU is visible and
// AISCALE_TEST_SHARED_GPU=1, both ranks on it over MPI (host staging). Empty: no two ranks.
std::string two_rank_launch(const fs::path& cfg) {
  const int gpus = parallel::cuda_visible_gpus();
  const char* shared = std::getenv("AISCALE_TEST_SHARED_GPU");
  const bool share = gpus == 1 && shared && std::string(shared) == "1";
  if (gpus < 2 && !share) return "";
  return "launch -n 2 --threads-per-rank 4 -- train -q -c " + cfg.string() +
         (share ? " --set parallel.communicator=mpi" : "");
}

// How far two runs of the same two-rank training may land apart at a step. cuDNN times its
// algorithms when the model is built, so runs fall on a few distinct trajectories: equal to
// 1e-6 through step 2, up to 2.4e-3 apart (relative) by step 5 (fp32, ResNet-18 below, one
// H200, 2026-11-29). Gradients left unsummed moved the loss by 2.4e-2 at step 2 and 4.7e-2
// at step 4, so the first steps are held tightly and the later ones loosely.
double run_spread(size_t step) { return step <= 2 ? 1e-5 : 1e-2; }

// ResNet-18 on 32x32 synthetic images, 16 per rank, 6 steps of SGD.
fs::path two_rank_config(const fs::path& dir) {
  const fs::path cfg = dir / "ddp.toml";
  std::ofstream(cfg) << "[model]\nkind = \"resnet\"\npreset = \"resnet18\"\nimage_size = 32\n"
                     << "[data]\nkind = \"synthetic\"\nsynthetic_images = 512\n"
                     << "synthetic_channels = 3\nsynthetic_classes = 10\n"
                     << "[train]\ndevice = \"cuda\"\nbatch_size = 16\nsteps = 6\nlr = 0.01\n"
                     << "log_every = 1\n"
                     << "[run]\ndir = \"" << dir.string() << "\"\n";
  return cfg;
}

// Two GPU ranks: the bucketed all-reduce during the backward against one all-reduce after
// it. With two ranks every sum is one addition, the same in any chunking,
// so the runs differ only as any two runs do (cuDNN's timed algorithm choice and its
// non-deterministic algorithms), which a second serial run measures; a bucket summed
// before its gradients were complete would differ far beyond that.
TEST(ResNetGpu, TwoRanksOverlappedAllReduceMatchesTheSerialOne) {
  const fs::path dir = temp_dir("vision-ddp-gpu");
  const fs::path cfg = two_rank_config(dir);
  const std::string launch = two_rank_launch(cfg);
  if (launch.empty()) GTEST_SKIP() << "needs 2 GPUs (or AISCALE_TEST_SHARED_GPU=1 on one)";
  const RunOutput a = run_aiscale(launch + " --set run.name=overlap");
  ASSERT_EQ(a.exit_code, 0) << a.output;
  const RunOutput b = run_aiscale(launch + " --set run.name=serial parallel.overlap_allreduce=false");
  ASSERT_EQ(b.exit_code, 0) << b.output;
  const RunOutput c = run_aiscale(launch + " --set run.name=again parallel.overlap_allreduce=false");
  ASSERT_EQ(c.exit_code, 0) << c.output;
  // A second overlapped run tells a race (the two overlapped runs differ as much as either
  // differs from the serial one) from a systematic difference (they agree with each other).
  const RunOutput d = run_aiscale(launch + " --set run.name=overlap_again");
  ASSERT_EQ(d.exit_code, 0) << d.output;
  const auto ma = read_metrics(dir / "overlap"), mb = read_metrics(dir / "serial"),
             mc = read_metrics(dir / "again"), md = read_metrics(dir / "overlap_again");
  ASSERT_EQ(ma.size(), mb.size());
  ASSERT_EQ(mc.size(), mb.size());
  ASSERT_GE(ma.size(), 6u);
  for (size_t i = 0; i < 6; ++i) {
    const double serial = mb[i]["loss"].get<double>();
    // Run-to-run spread of each mode (cuDNN's non-deterministic algorithms; the training
    // amplifies it step by step): a race would show far beyond both.
    const double noise = std::max(std::abs(mc[i]["loss"].get<double>() - serial),
                                  i < md.size() ? std::abs(md[i]["loss"].get<double>() -
                                                           ma[i]["loss"].get<double>())
                                                : 0.0);
    std::printf("step %zu: overlapped %.9g, overlapped again %.9g, serial %.9g, serial again %.9g\n",
                i + 1, ma[i]["loss"].get<double>(),
                i < md.size() ? md[i]["loss"].get<double>() : 0.0, serial,
                mc[i]["loss"].get<double>());
    EXPECT_NEAR(ma[i]["loss"].get<double>(), serial, run_spread(i + 1) * serial + 10 * noise)
        << "step " << i + 1;
  }
  const auto summary = nlohmann::json::parse(std::ifstream(dir / "overlap" / "summary.json"));
  EXPECT_EQ(summary["world_size"], 2);
}

// ZeRO-1 on two GPU ranks, through the reducer and the sharded-optimizer code GPT's GPUs
// use: the gradient buckets reduce-scattered, SGD on each rank's parts with its half of the
// momentum, the parameters all-gathered. With two ranks each sum is one addition and the
// update is per value, so its losses equal DDP's up to the runs' own spread (cuDNN's
// non-deterministic algorithms, measured by a second DDP run); each rank holds half of DDP's
// momentum (steps.jsonl); a checkpoint gathers the shards and resumes to the same losses.
// A wrong part (a rank updating values it does not own, a missing all-gather) moves the
// losses far beyond the spread.
TEST(ResNetGpu, TwoRanksZeroOneMatchesDdpAndResumes) {
  const fs::path dir = temp_dir("vision-zero1-gpu");
  const fs::path cfg = two_rank_config(dir);
  const std::string launch = two_rank_launch(cfg);
  if (launch.empty()) GTEST_SKIP() << "needs 2 GPUs (or AISCALE_TEST_SHARED_GPU=1 on one)";
  for (const char* set : {" --set run.name=ddp", " --set run.name=ddp_again",
                          " --set run.name=zero1 parallel.zero_stage=1 run.checkpoint_every=3",
                          " --set run.name=zero1_bf16 parallel.zero_stage=1 train.precision=bf16",
                          " --set run.name=ddp_bf16 train.precision=bf16"}) {
    const RunOutput r = run_aiscale(launch + set);
    ASSERT_EQ(r.exit_code, 0) << set << "\n" << r.output;
  }
  const auto ddp = read_metrics(dir / "ddp"), again = read_metrics(dir / "ddp_again"),
             zero1 = read_metrics(dir / "zero1"), zb = read_metrics(dir / "zero1_bf16"),
             db = read_metrics(dir / "ddp_bf16");
  ASSERT_GE(ddp.size(), 6u);
  ASSERT_GE(again.size(), 6u);
  ASSERT_GE(zero1.size(), 6u);
  ASSERT_GE(zb.size(), 6u);
  ASSERT_GE(db.size(), 6u);
  for (size_t i = 0; i < 6; ++i) {
    const double d = ddp[i]["loss"].get<double>(), z = zero1[i]["loss"].get<double>();
    const double noise = std::abs(again[i]["loss"].get<double>() - d);
    std::printf("step %zu: ddp %.9g, again %.9g, zero1 %.9g; bf16 ddp %.9g, zero1 %.9g\n", i + 1,
                d, again[i]["loss"].get<double>(), z, db[i]["loss"].get<double>(),
                zb[i]["loss"].get<double>());
    EXPECT_NEAR(z, d, run_spread(i + 1) * d + 10 * noise) << "step " << i + 1;
    // bf16 AMP: the 16-bit weights are rounded from the gathered fp32 parameters, as DDP's
    // update rounds them. bf16 runs spread further than fp32's: 6e-5 apart at step 1 (the
    // forward alone, before any update: cuDNN's algorithms), 2.5e-3 at step 2, 1.3e-2 by
    // step 4 (one H200, 2026-11-29; in another run the two were bit-identical over 6 steps).
    // Without the 16-bit copies refreshed after the all-gather the weights would never
    // change (2.63 against 1.94 by step 6): the later steps are held to 5e-2.
    if (i >= 2) {
      EXPECT_NEAR(zb[i]["loss"].get<double>(), db[i]["loss"].get<double>(),
                  5e-2 * db[i]["loss"].get<double>()) << "bf16 step " << i + 1;
    }
  }
  const auto full = optimizer_state_bytes(dir / "ddp"), half = optimizer_state_bytes(dir / "zero1");
  ASSERT_EQ(full.size(), 2u);
  ASSERT_EQ(half.size(), 2u);
  for (int r = 0; r < 2; ++r) {
    EXPECT_GT(full.at(r), 0);
    EXPECT_NEAR(half.at(r), full.at(r) / 2, 0.001 * full.at(r)) << "rank " << r;
  }
  // Resume from step 3's checkpoint (the momentum gathered from both shards, scattered
  // back): steps 4-6 as the run that never stopped.
  fs::remove_all(dir / "zero1" / "checkpoints" / "step_00000006");
  const RunOutput resumed = run_aiscale(
      "launch -n 2 --threads-per-rank 4 -- train -q --resume " + (dir / "zero1").string() +
      (launch.find("communicator=mpi") != std::string::npos ? " --set parallel.communicator=mpi"
                                                            : ""));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  const auto after = read_metrics(dir / "zero1");
  ASSERT_GE(after.size(), 6u);
  for (size_t i = 3; i < 6; ++i) {
    const double noise = std::abs(again[i]["loss"].get<double>() - ddp[i]["loss"].get<double>());
    EXPECT_NEAR(after[i]["loss"].get<double>(), zero1[i]["loss"].get<double>(),
                run_spread(i + 1) * zero1[i]["loss"].get<double>() + 10 * noise)
        << "resumed step " << i + 1;
  }
}

}  // namespace
}  // namespace aiscale::gpu_vision
