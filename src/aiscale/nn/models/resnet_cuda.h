// A ResNet on one GPU: the CPU model's network (nn::ResNet: same configuration, parameter
// names and order, initial values, running statistics) trained in NHWC on the device —
// cuDNN convolutions, the vision kernels of ops/vision/cuda for batch norm (with each
// block's residual add and ReLU fused into its last batch norm), pooling and the loss,
// cuBLASLt for the classifier, and SGD with momentum on fp32 master weights. Precision
// "fp32" computes in fp32 throughout (TF32 off unless `tf32`: PyTorch's fp32 peer
// measures it off); "bf16" and "fp16" are AMP: 16-bit activations and weight copies with
// fp32 accumulation, fp32 batch norm statistics, parameters, gradients and momentum (fp16
// with a static loss scale of 1024; bf16 needs none).
//
// The CPU model stays the host-side mirror: checkpoints read and write its vectors
// (download / upload convert between its layout and the device's).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "aiscale/nn/models/resnet.h"
#include "aiscale/nn/models/resnet_cuda_plan.h"

namespace aiscale::parallel {
class Communicator;
}
namespace aiscale::nn::detail {
class ResNetCudaDevice;
}

namespace aiscale::nn {

struct ResNetCudaOptions {
  int64_t max_batch = 32;
  std::string precision = "fp32";  // fp32 | bf16 | fp16
  bool tf32 = false;               // fp32: let cuDNN use TF32 tensor cores
  // cuDNN workspace in MiB; bounds the algorithm search. -1: from the GPU's free memory
  // beside the arena, 512 MiB to 16 GiB (resnet_cuda.cu, automatic_workspace).
  int64_t workspace_mib = -1;
  // Training batch norm kernels: "own" (ops/vision/cuda: deterministic, NHWC, the add and
  // ReLU fused), "cudnn" (cuDNN's fused spatial-persistent kernels where cuDNN takes the
  // layer, the own ones elsewhere; bf16 and fp16 only, fp32 keeps the own), or "auto": the
  // faster measured of the two per precision (docs/design/defaults.md), which is cudnn's
  // choice.
  std::string batchnorm = "auto";
  double momentum = 0.9, weight_decay = 1e-4;
  bool nesterov = false;
  bool decay_bn_and_bias = false;
  // Data parallelism over `comm`'s ranks (null or one rank: none), through the reducer GPT's
  // data parallelism uses (parallel/data_parallel/reducer.cuh): the gradients summed in
  // buckets of about 25 MiB as the backward completes them (overlap) or after it, and
  // with zero_stage 1 reduce-scattered, the momentum sharded over the ranks and the
  // parameters all-gathered after each step (optim/zero1.cuh). download() and upload() with
  // a velocity are then collective.
  parallel::Communicator* comm = nullptr;
  int zero_stage = 0;
  bool overlap = true;
  double timeout_s = 300;
};

class ResNetCuda {
 public:
  // Builds the device model from `host`'s configuration and copies its parameters and
  // running statistics (label smoothing and batch norm settings from host.options()).
  // Throws Error naming the fix without CUDA, cuDNN or a visible GPU.
  ResNetCuda(ResNet& host, const ResNetCudaOptions& options);
  ~ResNetCuda();
  ResNetCuda(const ResNetCuda&) = delete;
  ResNetCuda& operator=(const ResNetCuda&) = delete;

  const ResNetCudaPlan& plan() const { return plan_; }
  const ResNetCudaOptions& options() const { return options_; }

  // Copies n <= max_batch images (n, C, H, W, fp32, host) and labels to the device, where
  // they stay for every forward_loaded() until the next load.
  void load_batch(const float* images, const int32_t* labels, int64_t n);
  // Mean loss of the loaded batch; train: batch statistics (running statistics updated).
  double forward_loaded(bool train);
  double forward(const float* images, const int32_t* labels, int64_t n, bool train) {
    load_batch(images, labels, n);
    return forward_loaded(train);
  }
  // Correct top-1 and top-5 predictions of the last forward.
  void count_correct(int64_t& top1, int64_t& top5) const;
  void zero_grad();
  void backward();  // parameter gradients accumulate
  // Completes the sum of the gradients over options().comm's ranks (see
  // ResNetCudaOptions::comm); nothing on one rank.
  void reduce_gradients();
  // Values of momentum this rank keeps (its shard under ZeRO-1).
  int64_t state_values() const;
  // One SGD step on the gradients x grad_scale (1 / ranks: the mean over ranks).
  void sgd_step(double lr, float grad_scale = 1.0f);
  void synchronize();

  // Host copies in the CPU model's layout: parameters and running statistics into `host`,
  // momentum buffers into velocity (when not null).
  void download(ResNet& host, std::vector<float>* velocity);
  void upload(ResNet& host, const std::vector<float>* velocity);
  std::vector<float> gradients();

  std::string describe() const;
  int64_t arena_bytes() const;

 private:
  ResNetCudaOptions options_;
  ResNetCudaPlan plan_;
  std::unique_ptr<detail::ResNetCudaDevice> device_;
};

}  // namespace aiscale::nn
