#include <algorithm>
#include <cstring>

#include "aiscale/core/error.h"
#include "aiscale/ops/ops.h"
#include "aiscale/parallel/data_parallel/bucket_plan.h"
#include "aiscale/optim/data_parallel.h"
#include "aiscale/optim/host_data_parallel.h"

namespace aiscale::optim {

std::vector<int64_t> host_bucket_bounds(const HostModel& model, double bucket_mib) {
  const auto& tensors = *model.tensors;
  parallel::dp::GradientOrder order;
  // A host backward completes the tensors from the last to the first.
  for (size_t i = tensors.size(); i-- > 0;)
    order.push_back({tensors[i].offset, tensors[i].offset + tensors[i].size, int(i)});
  parallel::dp::BucketPlanOptions o;
  o.bucket_values = parallel::dp::bucket_values_for_mib(bucket_mib);
  const parallel::dp::BucketPlan plan = parallel::dp::plan_buckets(order, model.size, o);
  std::vector<int64_t> bounds;
  for (const parallel::dp::Bucket& b : plan.buckets) bounds.push_back(b.begin);
  std::sort(bounds.begin(), bounds.end());
  bounds.push_back(model.size);
  return bounds;
}

namespace {

class HostDdp final : public HostDataParallel {
 public:
  HostDdp(const HostModel& model, parallel::Communicator* comm, const OptimizerFactory& optimizer,
          const HostDataParallelOptions& o)
      : HostDataParallel(model, comm, o) {
    optimizer_ = optimizer(model.size);
    if (comm_) {
      parallel::algorithms::GradientExchangeOptions eo = o.exchange;
      for (const auto& t : *model.tensors) eo.segments.push_back(t.offset);  // AdaSum per tensor
      exchange_ = std::make_unique<parallel::algorithms::GradientExchange>(*comm_, eo, model.size);
    }
  }

  std::string name() const override { return "ddp"; }

  // The whole gradient through the exchange: a dense sum is the communicator's
  // all-reduce, which travels in buckets of its own (MPI: 25 MiB, every bucket's
  // non-blocking all-reduce posted at once so that MPI pipelines them; the ring and
  // hierarchical algorithms: their chunks); AdaSum and compression combine whole gradients.
  void reduce_gradients() override {
    if (exchange_) exchange_->exchange(model_.grads);
  }

  double divisor() const override { return exchange_ ? exchange_->divisor() : 1.0; }

  // One pass over the whole buffer (the tensors tile it): one parallel region, not one
  // per tensor, whose fork and join cost more than the small tensors' sums on a busy host.
  double grad_sum_squares() override {
    return ops::sum_squares(model_.grads, model_.size);
  }

  void step(const StepParams& p) override {
    optimizer_->step(model_.params, model_.grads, model_.size, 0, 0, p);
  }

  bool collective_state() const override { return false; }
  void get_state(int k, float* out) override {
    std::memcpy(out, optimizer_->state(k), size_t(model_.size) * 4);
  }
  void set_state(int k, const float* in) override {
    std::memcpy(optimizer_->state(k), in, size_t(model_.size) * 4);
  }
  void get_state_range(int k, const FlatRange& r, float* out) override {
    std::memcpy(out, optimizer_->state(k) + r.begin, size_t(r.count) * 4);
  }
  void set_state_range(int k, const FlatRange& r, const float* in) override {
    std::memcpy(optimizer_->state(k) + r.begin, in, size_t(r.count) * 4);
  }
  int64_t wire_bytes() const override { return exchange_ ? exchange_->wire_bytes() : 0; }

  nlohmann::json describe() const override {
    nlohmann::json j = exchange_ ? exchange_->describe()
                                 : nlohmann::json{{"allreduce", options_.exchange.allreduce},
                                                  {"grad_mixing", options_.exchange.mixing},
                                                  {"compression", options_.exchange.compression},
                                                  {"gradient_sync", "none (one rank)"}};
    j["data_parallel"] = name();
    j["optimizer"] = optimizer_->name();
    j["optimizer_state_bytes"] = optimizer_state_bytes();
    return j;
  }

 private:
  std::unique_ptr<parallel::algorithms::GradientExchange> exchange_;
};

}  // namespace

std::unique_ptr<DataParallel> make_host_ddp(const HostModel& model, parallel::Communicator* comm,
                                            const OptimizerFactory& optimizer,
                                            const HostDataParallelOptions& options) {
  return std::make_unique<HostDdp>(model, comm, optimizer, options);
}

}  // namespace aiscale::optim
