#include "aiscale/train/vision_gpu.h"

#include <algorithm>

#include "aiscale/core/error.h"

namespace aiscale::train {

double ResNetCudaModel::train_batch(const nn::Batch& b, float grad_multiplier) {
  AISCALE_CHECK(grad_multiplier == 1.0f, "the GPU ResNet takes no gradient accumulation");
  const double loss = gpu_.forward(b.images, b.labels, b.n, true);
  gpu_.backward();
  return loss;
}

double ResNetCudaModel::eval_batch(const nn::Batch& b) {
  return gpu_.forward(b.images, b.labels, b.n, false);
}

void ResNetCudaModel::add_metrics(double* sums) const {
  int64_t top1 = 0, top5 = 0;
  gpu_.count_correct(top1, top5);
  sums[0] += double(top1);
  sums[1] += double(top5);
}

void ResNetCudaManaged::get_params(float* out) {
  gpu_.download(host_, nullptr);  // the parameters are whole on every rank
  std::copy(host_.params().begin(), host_.params().end(), out);
}

void ResNetCudaManaged::set_params(const float* in) {
  std::copy(in, in + host_.num_params(), host_.params().begin());
  gpu_.upload(host_, nullptr);
}

void ResNetCudaManaged::get_state(int, float* out) {
  gpu_.download(host_, &velocity_);
  std::copy(velocity_.begin(), velocity_.end(), out);
}

void ResNetCudaManaged::set_state(int, const float* in) {
  velocity_.assign(in, in + host_.num_params());
  gpu_.upload(host_, &velocity_);
}

// Ring all-reduce: 2 (p - 1) / p of the gradients; ZeRO-1's reduce-scatter and the
// all-gather of the parameters move the same.
int64_t ResNetCudaManaged::wire_bytes() const {
  const int64_t p = comm_.world();
  return p > 1 ? 2 * (p - 1) * 4 * host_.num_params() / p : 0;
}

nlohmann::json ResNetCudaManaged::describe() const {
  return {{"data_parallel", name()},
          {"gradient_sync", comm_.world() <= 1 ? "none (one rank)"
                            : sharded()          ? "reducer buckets reduce-scattered (ZeRO-1)"
                                                 : "reducer buckets all-reduced"},
          {"grad_dense_bytes", 4 * host_.num_params()},
          {"grad_wire_bytes_per_step", wire_bytes()},
          {"optimizer", "sgd"},
          {"optimizer_state_bytes", optimizer_state_bytes()}};
}

}  // namespace aiscale::train
