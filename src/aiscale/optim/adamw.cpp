#include <algorithm>

#include "aiscale/core/error.h"
#include "aiscale/core/tensor.h"
#include "aiscale/ops/ops.h"
#include "aiscale/optim/optimizer.h"
#include "aiscale/profile/profiled_backend.h"

namespace aiscale::optim {
namespace {

class AdamW final : public Optimizer {
 public:
  AdamW(int64_t size, const AdamWOptions& o, const std::vector<ParamTensor>& tensors,
        const std::string& backend)
      : o_(o), tensors_(tensors), size_(size), m_(size_t(size) * 4, Device::cpu),
        v_(size_t(size) * 4, Device::cpu), backend_(backend), ops_(ops::backend_by_name(backend)) {
    m_.zero();
    v_.zero();
  }
  void set_profiler(profile::OpProfiler* p) override {
    ops_ = profile::profiled_host_backend(ops::backend_by_name(backend_), p);
  }
  std::string name() const override { return "adamw"; }
  std::vector<std::string> state_names() const override { return {"m", "v"}; }
  float* state(int k) override { return f32(k == 0 ? m_ : v_); }
  int64_t state_size() const override { return size_; }

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
    // The tensors overlapping [first_value, first_value + n): each run of neighbours with
    // the same decay in one call (AdamW is elementwise, so the values are the same as per
    // tensor; fewer calls are fewer parallel regions).
    const int64_t end = first_value + n;
    auto it = std::upper_bound(tensors_.begin(), tensors_.end(), first_value,
                               [](int64_t v, const ParamTensor& t) { return v < t.offset; });
    if (it != tensors_.begin()) --it;
    while (it != tensors_.end() && it->offset < end) {
      const bool decay = it->decay;
      const int64_t lo = std::max(first_value, it->offset);
      int64_t hi = std::min(end, it->offset + it->size);
      for (++it; it != tensors_.end() && it->offset < end && it->decay == decay; ++it)
        hi = std::min(end, it->offset + it->size);
      if (hi <= lo) continue;
      hp.weight_decay = decay ? float(o_.weight_decay) : 0.0f;
      const int64_t i = lo - first_value;
      ops_.adamw_update(params + i, grads + i, f32(m_) + state_offset + i,
                        f32(v_) + state_offset + i, hi - lo, hp);
    }
  }

 private:
  AdamWOptions o_;
  const std::vector<ParamTensor>& tensors_;
  static float* f32(Arena& a) { return static_cast<float*>(a.data()); }
  int64_t size_;
  Arena m_, v_;  // aligned like the model's buffers, for the vectorised kernel
  std::string backend_;
  ops::Backend ops_;  // a copy of the backend's table (a timed one while profiled)
};

}  // namespace

std::unique_ptr<Optimizer> make_adamw(int64_t state_size, const AdamWOptions& o,
                                      const std::vector<ParamTensor>& tensors,
                                      const std::string& backend) {
  return std::make_unique<AdamW>(state_size, o, tensors, backend);
}

}  // namespace aiscale::optim
