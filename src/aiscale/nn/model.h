// What the trainer knows of a model, whatever it computes (GPT-2 on tokens, a ResNet on
// images): its parameters as one flat fp32 buffer described by named tensors, its gradients
// in the same layout, forward + backward on a batch returning the loss, and its memory.
// Nothing here is about communicators, buckets or optimizer state: data parallelism and the
// optimizer sit outside the model (optim/data_parallel.h, optim/optimizer.h).
//
// The exception is a model that synchronises its gradients itself (the GPU GPT and ResNet
// models summing buckets on NCCL streams during backward, the CPU GPT model holding tensor
// slices or ZeRO-2/3 shards): it says so with synchronizes_gradients(), and the trainer then
// leaves the exchange and the update to the model's own interface.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "aiscale/core/param_tensor.h"

namespace aiscale::nn {

using aiscale::ParamTensor;

// One micro-batch, for any model: tokens (inputs and next-token targets, batch x seq) or
// images (n images NCHW fp32 with one label each). A model reads the fields it needs and
// refuses a batch without them.
struct Batch {
  const int32_t* tokens = nullptr;
  const int32_t* targets = nullptr;  // null: forward only (no loss)
  const float* images = nullptr;
  const int32_t* labels = nullptr;
  int64_t n = 0;  // images in the batch (a token batch's shape is the model's own)
};

class Model {
 public:
  virtual ~Model() = default;
  virtual int64_t num_params() const = 0;
  // The parameter tensors in flat order; their offsets and sizes tile [0, num_params()).
  virtual const std::vector<ParamTensor>& param_tensors() const = 0;
  // The flat fp32 parameters and gradients: host memory for a host model; for a GPU model
  // device memory (synchronizes_gradients() is then true and the trainer does not touch it).
  virtual float* param_buffer() = 0;
  virtual float* grad_buffer() = 0;
  // Forward and backward of one micro-batch: returns the batch's mean loss; parameter
  // gradients ACCUMULATE, scaled by grad_multiplier (gradient accumulation's 1/steps).
  virtual double train_batch(const Batch& batch, float grad_multiplier) = 0;
  // Forward only (evaluation): the mean loss, nothing kept for backward.
  virtual double eval_batch(const Batch& batch) = 0;
  virtual void zero_grad() = 0;
  // Bytes of activations (and their gradients) the model holds for its largest batch.
  virtual size_t activation_bytes() const = 0;

  // Counts of the last train_batch / eval_batch beyond the loss (a classifier's correct
  // predictions among the top 1 and top 5 classes), added into `sums`, one per name; the
  // trainer sums them over the ranks and divides by the samples.
  virtual std::vector<std::string> metric_names() const { return {}; }
  virtual void add_metrics(double* sums) const { (void)sums; }

  // True when the model sums its gradients over the ranks itself (see above).
  virtual bool synchronizes_gradients() const { return false; }
};

}  // namespace aiscale::nn
