// Training-mode batch norm from the vision ops: batch statistics (optionally summed over
// every rank of a communicator: synchronised batch norm), the running statistics used in
// evaluation, and the backward. The per-channel sums travel in double, 2*C values per
// all-reduce. A layer of the models rather than an op: the synchronised statistics are a
// collective, and ops/ stands below parallel/ (docs/design/layers.md).
#pragma once
#include <cstdint>
#include <vector>

#include "aiscale/ops/vision/vision_ops.h"

namespace aiscale::parallel {
class Communicator;
}

namespace aiscale::nn {

struct BatchNormSpec {
  int64_t N = 0, C = 0, HW = 0;
  float eps = 1e-5f;
  float momentum = 0.1f;  // running = (1 - momentum) * running + momentum * batch (PyTorch's)
};

// What the forward keeps for the backward.
struct BatchNormSaved {
  std::vector<float> mean, rstd;  // (C)
  double count = 0;               // values per channel behind the statistics
};

// out = batch-normalised inp with the batch's statistics (over every rank of `sync` when
// not null); updates running_mean / running_var (unbiased variance) when not null.
void batchnorm_train_forward(const ops::vision::VisionBackend& backend, float* out,
                             const float* inp, const float* gamma, const float* beta,
                             float* running_mean, float* running_var, const BatchNormSpec& spec,
                             BatchNormSaved& saved, parallel::Communicator* sync);

// dinp (overwrite) through the batch statistics; dgamma, dbeta += this rank's share (the
// data-parallel reducer sums the shares like any other gradient).
void batchnorm_train_backward(const ops::vision::VisionBackend& backend, float* dinp,
                              float* dgamma, float* dbeta, const float* dout, const float* inp,
                              const float* gamma, const BatchNormSpec& spec,
                              const BatchNormSaved& saved, parallel::Communicator* sync);

// Evaluation: out normalised with the running statistics.
void batchnorm_eval_forward(const ops::vision::VisionBackend& backend, float* out,
                            const float* inp, const float* gamma, const float* beta,
                            const float* running_mean,
                            const float* running_var, const BatchNormSpec& spec);

}  // namespace aiscale::nn
