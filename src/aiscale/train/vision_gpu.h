// A vision run on a GPU through the one trainer: the device ResNet (nn/models/resnet_cuda.h)
// as an nn::Model whose gradients are summed while its backward goes on (by the
// data-parallel reducer GPT's GPUs use, with ZeRO-1 through the same sharded-optimizer
// code), and the "model" data-parallel wrapper that forwards the exchange and its SGD step
// on the device to it. The CPU ResNet stays the host mirror for checkpoints.
#pragma once
#include <vector>

#include "aiscale/nn/model.h"
#include "aiscale/nn/models/resnet.h"
#include "aiscale/nn/models/resnet_cuda.h"
#include "aiscale/parallel/comm.h"
#include "aiscale/optim/data_parallel.h"

namespace aiscale::train {

class ResNetCudaModel final : public nn::Model {
 public:
  ResNetCudaModel(nn::ResNetCuda& gpu, nn::ResNet& host) : gpu_(gpu), host_(host) {}
  int64_t num_params() const override { return host_.num_params(); }
  const std::vector<nn::ParamTensor>& param_tensors() const override { return host_.param_tensors(); }
  // The device buffers are the model's own (NHWC layouts): not handed out.
  float* param_buffer() override { return nullptr; }
  float* grad_buffer() override { return nullptr; }
  double train_batch(const nn::Batch& b, float grad_multiplier) override;
  double eval_batch(const nn::Batch& b) override;
  void zero_grad() override { gpu_.zero_grad(); }
  // The device arena: activations, weights and their gradients together.
  size_t activation_bytes() const override { return size_t(gpu_.arena_bytes()); }
  std::vector<std::string> metric_names() const override { return {"top1", "top5"}; }
  void add_metrics(double* sums) const override;
  bool synchronizes_gradients() const override { return true; }

 private:
  nn::ResNetCuda& gpu_;
  nn::ResNet& host_;
};

class ResNetCudaManaged final : public optim::DataParallel {
 public:
  // `velocity` is the host mirror of the momentum (checkpoints).
  ResNetCudaManaged(nn::ResNetCuda& gpu, nn::ResNet& host, parallel::Communicator& comm)
      : gpu_(gpu), host_(host), comm_(comm) {}
  std::string name() const override { return "model"; }
  void reduce_gradients() override { gpu_.reduce_gradients(); }
  double divisor() const override { return double(comm_.world()); }
  // The device gradients stay on the device: no norm (vision runs do not clip).
  bool measures_grad_norm() const override { return false; }
  double grad_sum_squares() override { return 0.0; }
  void step(const optim::StepParams& p) override {
    gpu_.sgd_step(p.lr, p.grad_scale);
    gpu_.synchronize();
  }
  // ZeRO-1: the momentum is gathered from the ranks' shards (every rank takes part).
  bool collective_state() const override { return sharded(); }
  void get_params(float* out) override;
  void set_params(const float* in) override;
  std::vector<std::string> state_names() const override { return {"momentum"}; }
  void get_state(int k, float* out) override;
  void set_state(int k, const float* in) override;
  size_t optimizer_state_bytes() const override { return 4 * size_t(gpu_.state_values()); }
  int64_t wire_bytes() const override;
  nlohmann::json describe() const override;

 private:
  bool sharded() const { return gpu_.options().zero_stage == 1 && comm_.world() > 1; }
  nn::ResNetCuda& gpu_;
  nn::ResNet& host_;
  parallel::Communicator& comm_;
  std::vector<float> velocity_;
};

}  // namespace aiscale::train
