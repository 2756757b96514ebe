// The optimizer of a host model, outside the model: a per-value rule over a flat fp32
// parameter buffer with its state (AdamW's moments, SGD's momentum) laid out like the values
// it updates. It updates any contiguous piece of the model: the whole buffer (one rank, DDP)
// or the pieces of a ZeRO-1 shard, whose state is then only the shard's
// (optim/data_parallel.h). Weight decay follows the model's tensors (ParamTensor::decay),
// looked up by each value's flat index in the model.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "aiscale/core/param_tensor.h"

namespace aiscale::profile {
class OpProfiler;
}

namespace aiscale::optim {

struct StepParams {
  double lr = 0;
  int64_t step = 1;         // 1-based (AdamW's bias correction)
  float grad_scale = 1.0f;  // gradients are multiplied by this first (averaging, clipping)
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  virtual std::string name() const = 0;  // "adamw", "sgd"
  // The state buffers, each state_size() values: AdamW "m", "v"; SGD "momentum".
  virtual std::vector<std::string> state_names() const = 0;
  virtual float* state(int k) = 0;
  virtual int64_t state_size() const = 0;
  size_t state_bytes() const { return state_names().size() * sizeof(float) * size_t(state_size()); }
  // Updates params[0, n) from grads[0, n) * p.grad_scale; their state starts at
  // state_offset, and params[0] is value `first_value` of the model (for the decay).
  virtual void step(float* params, const float* grads, int64_t n, int64_t state_offset,
                    int64_t first_value, const StepParams& p) = 0;
  // --profile: record the optimizer's ops into `profiler` from now on (null: stop).
  virtual void set_profiler(profile::OpProfiler* profiler) { (void)profiler; }
};

struct AdamWOptions {
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.0;  // decoupled decay
};

// AdamW through a host ops backend's fused kernel (ops::Backend::adamw_update, backend
// "cpu" or "reference"), one call per tensor piece so that the decay follows the tensor.
// `tensors` must outlive it.
std::unique_ptr<Optimizer> make_adamw(int64_t state_size, const AdamWOptions& o,
                                      const std::vector<ParamTensor>& tensors,
                                      const std::string& backend = "cpu");

}  // namespace aiscale::optim
