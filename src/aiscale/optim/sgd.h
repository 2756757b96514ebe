// SGD with momentum (PyTorch's form: v = mu * v + g; p -= lr * v, or with Nesterov
// p -= lr * (g + mu * v)), L2 weight decay folded into the gradient (g += wd * p) on the
// tensors a mask selects, and the learning-rate schedule of large-batch image training:
// linear warm-up, then step or cosine decay, with the linear scaling rule for the peak.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "aiscale/optim/optimizer.h"

namespace aiscale::optim {

struct SgdOptions {
  double momentum = 0.9;
  bool nesterov = false;
  double weight_decay = 1e-4;
};

class Sgd final : public Optimizer {
 public:
  // Momentum for `state_size` values (the model's, or a ZeRO-1 shard's). `decay` marks,
  // per value of the whole model, whether weight decay applies (empty: everywhere).
  Sgd(int64_t state_size, SgdOptions options, std::vector<uint8_t> decay = {});
  // Out of line, beside the vtable: deleted through an Optimizer pointer.
  ~Sgd() override;
  // One step of every value at learning rate lr; grads are read, not changed.
  void step(float* params, const float* grads, double lr);
  std::vector<float>& velocity() { return velocity_; }  // the momentum buffer (checkpoints)
  const SgdOptions& options() const { return options_; }

  // Optimizer: a piece of the model (see optimizer.h).
  std::string name() const override { return "sgd"; }
  std::vector<std::string> state_names() const override { return {"momentum"}; }
  float* state(int) override { return velocity_.data(); }
  int64_t state_size() const override { return int64_t(velocity_.size()); }
  void step(float* params, const float* grads, int64_t n, int64_t state_offset,
            int64_t first_value, const StepParams& p) override;

 private:
  SgdOptions options_;
  std::vector<uint8_t> decay_;
  std::vector<float> velocity_;
};

// The linear scaling rule (Goyal et al. 2017, "Accurate, Large Minibatch SGD"): a learning
// rate tuned for a batch of `reference_batch` images scales in proportion to the global
// batch, lr = base_lr * global_batch / reference_batch (256 in the ImageNet literature).
double linear_scaled_lr(double base_lr, int64_t global_batch, int64_t reference_batch = 256);

struct LrSchedule {
  double peak_lr = 0.1;       // after warm-up (already scaled)
  int64_t warmup_steps = 0;   // linear from peak/warmup_steps to peak
  int64_t total_steps = 1;
  std::string decay = "cosine";  // "cosine" (to min_lr), "step", "constant"
  double min_lr = 0.0;           // cosine's floor
  int64_t step_every = 0;        // "step": multiply by gamma every step_every steps after warm-up
  double gamma = 0.1;
};

// Learning rate of optimizer step `step` (0-based).
double scheduled_lr(const LrSchedule& s, int64_t step);

}  // namespace aiscale::optim
