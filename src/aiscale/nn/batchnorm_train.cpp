#include "aiscale/nn/batchnorm_train.h"

#include <algorithm>
#include <cmath>

#include "aiscale/parallel/comm.h"

namespace aiscale::nn {

using ops::vision::VisionBackend;

void batchnorm_train_forward(const VisionBackend& backend, float* out, const float* inp,
                             const float* gamma, const float* beta, float* running_mean,
                             float* running_var, const BatchNormSpec& spec, BatchNormSaved& saved,
                             parallel::Communicator* sync) {
  const int64_t C = spec.C;
  std::vector<double> sums(2 * C);  // sum (C), then sum of squares (C)
  backend.batchnorm_stats(sums.data(), sums.data() + C, inp, spec.N, C, spec.HW);
  double count = double(spec.N * spec.HW);
  if (sync && sync->world() > 1) {
    sync->allreduce_sum(sums.data(), 2 * C);
    count *= sync->world();
  }
  saved.mean.resize(C);
  saved.rstd.resize(C);
  saved.count = count;
  for (int64_t c = 0; c < C; ++c) {
    const double mean = sums[c] / count;
    const double var = std::max(sums[C + c] / count - mean * mean, 0.0);
    saved.mean[c] = float(mean);
    saved.rstd[c] = float(1.0 / std::sqrt(var + spec.eps));
    if (running_mean && running_var) {
      const double unbiased = count > 1 ? var * count / (count - 1) : var;
      running_mean[c] = float((1.0 - spec.momentum) * running_mean[c] + spec.momentum * mean);
      running_var[c] = float((1.0 - spec.momentum) * running_var[c] + spec.momentum * unbiased);
    }
  }
  backend.batchnorm_forward(out, inp, saved.mean.data(), saved.rstd.data(), gamma, beta, spec.N,
                            C, spec.HW);
}

void batchnorm_train_backward(const VisionBackend& backend, float* dinp, float* dgamma,
                              float* dbeta, const float* dout, const float* inp,
                              const float* gamma, const BatchNormSpec& spec,
                              const BatchNormSaved& saved, parallel::Communicator* sync) {
  const int64_t C = spec.C;
  std::vector<double> sums(2 * C);  // sum dout (C), then sum dout * xhat (C)
  backend.batchnorm_backward_reduce(sums.data(), sums.data() + C, dout, inp, saved.mean.data(),
                                    saved.rstd.data(), spec.N, C, spec.HW);
  for (int64_t c = 0; c < C; ++c) {
    dbeta[c] += float(sums[c]);
    dgamma[c] += float(sums[C + c]);
  }
  if (sync && sync->world() > 1) sync->allreduce_sum(sums.data(), 2 * C);
  backend.batchnorm_backward(dinp, dout, inp, saved.mean.data(), saved.rstd.data(), gamma,
                             sums.data(), sums.data() + C, saved.count, spec.N, C, spec.HW);
}

void batchnorm_eval_forward(const VisionBackend& backend, float* out, const float* inp,
                            const float* gamma, const float* beta, const float* running_mean,
                            const float* running_var, const BatchNormSpec& spec) {
  std::vector<float> rstd(spec.C);
  for (int64_t c = 0; c < spec.C; ++c) rstd[c] = 1.0f / std::sqrt(running_var[c] + spec.eps);
  backend.batchnorm_forward(out, inp, running_mean, rstd.data(), gamma, beta, spec.N, spec.C,
                            spec.HW);
}

}  // namespace aiscale::nn
