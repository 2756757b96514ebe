// What the host wrappers of data_parallel.h (host_ddp.cpp, host_zero1.cpp) share: the
// model's buffers, the communicator (null for one rank), the options and the optimizer, and
// what only passes through to them.
#pragma once
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "aiscale/optim/data_parallel.h"

namespace aiscale::optim {

class HostDataParallel : public DataParallel {
 public:
  void set_profiler(profile::OpProfiler* p) override { optimizer_->set_profiler(p); }
  void get_params(float* out) override {
    std::memcpy(out, model_.params, size_t(model_.size) * 4);
  }
  void set_params(const float* in) override {
    std::memcpy(model_.params, in, size_t(model_.size) * 4);
  }
  // The parameters are the model's whole buffer on every rank: a range is a copy.
  bool streams_state() const override { return true; }
  void get_params_range(const FlatRange& r, float* out) override {
    std::memcpy(out, model_.params + r.begin, size_t(r.count) * 4);
  }
  void set_params_range(const FlatRange& r, const float* in) override {
    std::memcpy(model_.params + r.begin, in, size_t(r.count) * 4);
  }
  std::vector<std::string> state_names() const override { return optimizer_->state_names(); }
  size_t optimizer_state_bytes() const override { return optimizer_->state_bytes(); }

 protected:
  // A world of one is no communicator.
  HostDataParallel(const HostModel& model, parallel::Communicator* comm,
                   const HostDataParallelOptions& options)
      : model_(model), comm_(comm && comm->world() > 1 ? comm : nullptr), options_(options) {}

  HostModel model_;
  parallel::Communicator* comm_;
  HostDataParallelOptions options_;
  std::unique_ptr<Optimizer> optimizer_;  // set by the wrapper, over the state it keeps
};

}  // namespace aiscale::optim
