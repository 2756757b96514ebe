// A ResNet on the host (NCHW, fp32) with explicit forward and backward over the vision ops
// (ops/vision): every parameter in one flat buffer in torchvision's named_parameters order
// (conv1.weight, bn1.weight, bn1.bias, layer1.0.conv1.weight, ..., fc.weight, fc.bias), so a
// PyTorch state dict maps onto it by name; the batch norms' running statistics in a second
// buffer (torchvision's buffers, without num_batches_tracked). Every activation is
// allocated once for the largest batch at construction; nothing allocates inside a step.
//
// An nn::Model of image batches. It knows no data-parallel reducer: gradients are this
// rank's; the trainer's data-parallel wrapper sums them. The only collective inside is
// synchronised batch norm, when a communicator is set.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "aiscale/nn/model.h"
#include "aiscale/nn/models/resnet_config.h"
#include "aiscale/ops/vision/vision_ops.h"

namespace aiscale::parallel {
class Communicator;
}

namespace aiscale::nn {

// One named tensor inside the parameter (or running-statistics) buffer. Weight decay
// (`decay`) applies by default to convolution and classifier weights only, not to batch
// norm scales and shifts or biases (the large-batch practice of Goyal et al.).
using ResNetTensor = ParamTensor;

struct ResNetOptions {
  int64_t max_batch = 32;        // largest batch forward() accepts
  float label_smoothing = 0.0f;
  float bn_momentum = 0.1f, bn_eps = 1e-5f;
  bool zero_init_residual = false;  // last BN scale of each block starts at 0
  uint64_t seed = 0;                // initialisation
};

class ResNet final : public Model {
 public:
  ResNet(const ResNetConfig& config, const ResNetOptions& options,
         const ops::vision::VisionBackend& backend);
  ~ResNet() override;
  ResNet(const ResNet&) = delete;
  ResNet& operator=(const ResNet&) = delete;

  const ResNetConfig& config() const { return config_; }
  const ResNetOptions& options() const { return options_; }
  int64_t num_parameters() const { return int64_t(params_.size()); }
  const std::vector<ResNetTensor>& parameter_tensors() const { return param_tensors_; }
  const std::vector<ResNetTensor>& buffer_tensors() const { return buffer_tensors_; }
  std::vector<float>& params() { return params_; }
  std::vector<float>& grads() { return grads_; }
  std::vector<float>& buffers() { return buffers_; }  // BN running means and variances

  // nn::Model: the parameters and gradients above; a batch of images with labels. The
  // metrics are the correct predictions among the top 1 and top 5 classes.
  int64_t num_params() const override { return num_parameters(); }
  const std::vector<ParamTensor>& param_tensors() const override { return param_tensors_; }
  float* param_buffer() override { return params_.data(); }
  float* grad_buffer() override { return grads_.data(); }
  double train_batch(const Batch& b, float grad_multiplier) override;
  double eval_batch(const Batch& b) override;
  size_t activation_bytes() const override;
  std::vector<std::string> metric_names() const override { return {"top1", "top5"}; }
  void add_metrics(double* sums) const override;

  // Synchronised batch norm: statistics over every rank of `comm` (null: this rank's).
  void set_batchnorm_sync(parallel::Communicator* comm) { bn_sync_ = comm; }

  // Forward pass over n <= max_batch images (n, C, H, W) with labels; returns the mean loss
  // over the n images. train: batch statistics (and running-statistics updates); else the
  // running statistics. The logits stay readable until the next forward.
  double forward(const float* images, const int32_t* labels, int64_t n, bool train);
  // Backward of the last (training) forward's mean loss times grad_multiplier: parameter
  // gradients ACCUMULATE into grads() (zero_grad() first for a fresh step).
  void backward(float grad_multiplier = 1.0f);
  void zero_grad() override;
  const float* logits() const;  // (n, num_classes)
  // Correct predictions of the last forward among the top 1 and top 5 classes.
  void count_correct(const int32_t* labels, int64_t n, int64_t& top1, int64_t& top5) const;

  // Forward FLOPs per image (multiply-adds x 2 of convolutions and the classifier).
  double forward_flops_per_image() const;

 // The layer list and activations (resnet.cpp).
  struct Impl;

 private:
  ResNetConfig config_;
  ResNetOptions options_;
  const ops::vision::VisionBackend& backend_;
  parallel::Communicator* bn_sync_ = nullptr;
  std::vector<float> params_, grads_, buffers_;
  std::vector<ResNetTensor> param_tensors_, buffer_tensors_;
  std::unique_ptr<Impl> impl_;
};

// Parameters of a configuration without building a model (torchvision's count).
int64_t resnet_parameter_count(const ResNetConfig& config);

}  // namespace aiscale::nn
