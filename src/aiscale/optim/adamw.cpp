#include <algorithm>

#include "aiscale/core/error.h"
#include "aiscale/ops/ops.h"
#include "aiscale/optim/optimizer.h"
#include "aiscale/profile/profiled_backend.h"

namespace aiscale::optim {
namespace {

class AdamW final : public Optimizer {
 public:
  AdamW(int64_t size, const AdamWOptions& o, const std::vector<nn::ParamTensor>& tensors,
        const std::string& backend)
      : o_(o), tensors_(tensors), m_(size_t(size), 0.0f), v_(size_t(size), 0.0f),
        backend_(backend), ops_(ops::backend_by_name(backend)) {}
  void set_profiler(profile::OpProfiler* p) override {
    ops_ = profile::profiled_host_backend(ops::backend_by_name(backend_), p);
  }
  std::string name() const override { return "adamw"; }
  std::vector<std::string> state_names() const override { return {"m", "v"}; }
  float* state(int k) override { return k == 0 ? m_.data() : v_.data(); }
  int64_t state_size() const override { return int64_t(m_.size()); }

  void step(float* params, const float* grads, int64_t n, int64_t state_offset,
            int64_t first_value, const StepParams& p) override {
    AISCALE_CHECK(state_offset >= 0 && state_offset + n <= state_size(),
                  "AdamW state [{}, {}) of {} values", state_offset, state_offset + n, state_size());
    ops::AdamWParams hp;
    hp.lr = float(p.lr);
    hp.beta1 = float(o_.beta1);
    hp.beta2 = float(o_.beta2);
    hp.eps = float(o_.eps);
    hp.step = p.step;
    hp.grad_scale = p.grad_scale;
    // The tensors overlapping [first_value, first_value + n), each piece with its decay.
    const int64_t end = first_value + n;
    auto it = std::upper_bound(tensors_.begin(), tensors_.end(), first_value,
                               [](int64_t v, const nn::ParamTensor& t) { return v < t.offset; });
    if (it != tensors_.begin()) --it;
    for (; it != tensors_.end() && it->offset < end; ++it) {
      const int64_t lo = std::max(first_value, it->offset), hi = std::min(end, it->offset + it->size);
      if (hi <= lo) continue;
      hp.weight_decay = it->decay ? float(o_.weight_decay) : 0.0f;
      const int64_t i = lo - first_value;
      ops_.adamw_update(params + i, grads + i, m_.data() + state_offset + i,
                        v_.data() + state_offset + i, hi - lo, hp);
    }
  }

 private:
  AdamWOptions o_;
  const std::vector<nn::ParamTensor>& tensors_;
  std::vector<float> m_, v_;
  std::string backend_;
  ops::Backend ops_;  // a copy of the backend's table (a timed one while profiled)
};

}  // namespace

std::unique_ptr<Optimizer> make_adamw(int64_t state_size, const AdamWOptions& o,
                                      const std::vector<nn::ParamTensor>& tensors,
                                      const std::string& backend) {
  return std::make_unique<AdamW>(state_size, o, tensors, backend);
}

}  // namespace aiscale::optim
