// The device half of the GPU ResNet (resnet_cuda.cu), behind a plain C++ interface so that
// host code (resnet_cuda.cpp) reaches it without CUDA headers. Every vector crossing this
// interface is in the device parameter layout of the plan (resnet_cuda_plan.h); the host
// half converts.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "aiscale/core/dtype.h"
#include "aiscale/nn/models/resnet_cuda_plan.h"

namespace aiscale::parallel {
class Communicator;
}

namespace aiscale::nn::detail {

struct ResNetCudaSettings {
  DType dtype = DType::f32;  // activations and convolution / classifier inputs
  bool tf32 = false;         // fp32 convolutions may use TF32 tensor cores
  size_t workspace_bytes = size_t(512) << 20;  // cuDNN's workspace (algorithm search limit)
  // Size the workspace from the GPU's free memory instead (ResNetCudaOptions::workspace_mib < 0).
  bool workspace_auto = false;
  float label_smoothing = 0.0f, bn_momentum = 0.1f, bn_eps = 1e-5f;
  float momentum = 0.9f, weight_decay = 0.0f;
  bool nesterov = false;
  // The loss gradient is multiplied by this (fp16: gradients below fp16's range would
  // flush to zero) and the optimiser and get_grads() divide it out again.
  float loss_scale = 1.0f;
  // Batch norm through cuDNN's fused kernels where cuDNN takes the layer (the rest keep
  // the project's own kernels).
  bool cudnn_batchnorm = false;
  // Data parallelism over `comm` (several ranks, a communicator with a device stream): the
  // data-parallel reducer GPT uses (parallel/data_parallel/reducer.cuh) sums the gradients
  // in buckets of about bucket_mib, each as soon as the backward has completed it
  // (overlap) or all after the backward; zero_stage 1 reduce-scatters them instead and
  // shards the momentum (optim/zero1.cuh), the parameters all-gathered after each step.
  // (MPI and TCP ranks on GPUs stage these collectives through host memory.)
  parallel::Communicator* comm = nullptr;
  int zero_stage = 0;
  bool overlap = true;
  double bucket_mib = 25;
  double timeout_s = 300;
};

// Whether this build has cuDNN (the convolutions need it).
bool resnet_cuda_has_cudnn();

class ResNetCudaDevice {
 public:
  // Allocates the arena, chooses every convolution's algorithms, zeroes the state.
  static std::unique_ptr<ResNetCudaDevice> create(const ResNetCudaPlan& plan,
                                                  const ResNetCudaSettings& settings);
  virtual ~ResNetCudaDevice() = default;

  // Host arrays: params and velocity num_params values (device layout), buffers
  // num_buffers. velocity may be null (zeros).
  // Under ZeRO-1 both are collective when velocity is not null (every rank calls them:
  // the momentum is gathered from, or scattered into, the ranks' shards).
  virtual void set_state(const float* params, const float* buffers, const float* velocity) = 0;
  virtual void get_state(float* params, float* buffers, float* velocity) = 0;
  virtual void get_grads(float* grads) = 0;

  // images (n, C, H, W) fp32 and labels (n) on the host, n <= max_batch; they stay on the
  // device for every forward until the next load.
  virtual void load_batch(const float* images, const int32_t* labels, int64_t n) = 0;
  // Mean loss over the loaded batch (waits for the GPU); training mode also prepares the
  // logits' gradient for backward().
  virtual double forward(bool train) = 0;
  virtual void correct(int64_t& top1, int64_t& top5) const = 0;
  virtual void zero_grad() = 0;
  virtual void backward() = 0;  // parameter gradients accumulate
  // Completes the sum of the gradients over the ranks (waits for the buckets the backward
  // started); nothing on one rank.
  virtual void reduce_gradients() = 0;
  // Values of momentum this rank keeps (its shard under ZeRO-1).
  virtual int64_t state_values() const = 0;
  // SGD on the gradients x grad_scale (1 / ranks for the mean).
  virtual void sgd_step(double lr, float grad_scale) = 0;
  virtual void synchronize() = 0;
  virtual std::string describe() const = 0;
  virtual int64_t arena_bytes() const = 0;
};

}  // namespace aiscale::nn::detail
