#include <algorithm>
#include <cstring>

#include "aiscale/core/error.h"
#include "aiscale/ops/ops.h"
#include "aiscale/optim/zero_shards.h"
#include "aiscale/optim/data_parallel.h"
#include "aiscale/optim/host_data_parallel.h"

namespace aiscale::optim {
namespace {

class HostZero1 final : public HostDataParallel {
 public:
  HostZero1(const HostModel& model, parallel::Communicator* comm, const OptimizerFactory& optimizer,
            const HostDataParallelOptions& o)
      : HostDataParallel(model, comm, o), shards_(host_bucket_bounds(model, o.bucket_mib), comm_) {
    if (o.exchange.mixing == "adasum" || o.exchange.compression != "none")
      fail("parallel.zero_stage = 1 reduce-scatters the dense gradients: it takes neither "
           "parallel.grad_mixing = \"adasum\" nor parallel.compression (got \"{}\", \"{}\"): "
           "set parallel.grad_mixing = \"average\" and parallel.compression = \"none\", or "
           "parallel.zero_stage = 0", o.exchange.mixing, o.exchange.compression);
    grads_.assign(size_t(shards_.shards_size()), 0.0f);
    optimizer_ = optimizer(shards_.shards_size());
  }

  std::string name() const override { return "zero1"; }

  // Each bucket's sum over the ranks, of which this rank keeps its part.
  void reduce_gradients() override {
    std::fill(grads_.begin(), grads_.end(), 0.0f);
    const float* g = model_.grads;
    for (int u = shards_.units(); u-- > 0;)
      shards_.reduce_scatter_add(u, g + shards_.unit_begin(u), grads_.data() + shards_.shard_offset(u));
  }

  double divisor() const override {
    return options_.exchange.mixing == "average" && comm_ ? double(comm_->world()) : 1.0;
  }

  double grad_sum_squares() override {
    double s = ops::sum_squares(grads_.data(), int64_t(grads_.size()));  // padding is zero
    if (comm_) comm_->allreduce_sum(&s, 1);
    return s;
  }

  // The optimizer on this rank's part of every bucket, then the buckets gathered whole.
  void step(const StepParams& p) override {
    float* params = model_.params;
    for (int u = 0; u < shards_.units(); ++u) {
      const int64_t lo = shards_.owned_begin(u), hi = shards_.owned_end(u);
      if (hi > lo)
        optimizer_->step(params + lo, grads_.data() + shards_.shard_offset(u), hi - lo,
                         shards_.shard_offset(u), lo, p);
    }
    for (int u = 0; u < shards_.units(); ++u)
      shards_.gather(u, params + shards_.owned_begin(u), params + shards_.unit_begin(u));
  }

  bool collective_state() const override { return comm_ != nullptr; }
  void get_state(int k, float* out) override {
    const float* s = optimizer_->state(k);
    for (int u = 0; u < shards_.units(); ++u)
      shards_.gather(u, s + shards_.shard_offset(u), out + shards_.unit_begin(u));
  }
  void set_state(int k, const float* in) override {
    float* s = optimizer_->state(k);
    for (int u = 0; u < shards_.units(); ++u) {
      float* mine = s + shards_.shard_offset(u);
      std::fill(mine, mine + shards_.shard(u), 0.0f);
      std::copy(in + shards_.owned_begin(u), in + shards_.owned_end(u), mine);
    }
  }
  // A range of the state: each rank adds the values it owns into a zeroed range, and the
  // sum over the ranks is the whole range (the owned parts tile every bucket).
  void get_state_range(int k, const FlatRange& r, float* out) override {
    std::fill(out, out + r.count, 0.0f);
    const float* s = optimizer_->state(k);
    for_owned_in(r, [&](int u, int64_t lo, int64_t hi) {
      std::copy(s + shards_.shard_index(u, lo), s + shards_.shard_index(u, hi), out + (lo - r.begin));
    });
    if (comm_) comm_->allreduce_sum(out, r.count);
  }
  void set_state_range(int k, const FlatRange& r, const float* in) override {
    float* s = optimizer_->state(k);
    for_owned_in(r, [&](int u, int64_t lo, int64_t hi) {
      std::copy(in + (lo - r.begin), in + (hi - r.begin), s + shards_.shard_index(u, lo));
    });
  }
  // A reduce-scatter and an all-gather, each (p-1)/p of the dense bytes on a ring.
  int64_t wire_bytes() const override {
    if (!comm_) return 0;
    const int64_t p = comm_->world();
    return 2 * (p - 1) * 4 * shards_.shards_size();
  }

  nlohmann::json describe() const override {
    return {{"data_parallel", name()},
            {"allreduce", options_.exchange.allreduce},
            {"grad_mixing", options_.exchange.mixing},
            {"compression", "none"},
            {"buckets", shards_.units()},
            {"grad_dense_bytes", 4 * model_.size},
            {"grad_wire_bytes_per_step", wire_bytes()},
            {"optimizer", optimizer_->name()},
            {"optimizer_state_bytes", optimizer_state_bytes()}};
  }

 private:
  // fn(unit, lo, hi) for each part [lo, hi) of the range this rank owns.
  template <typename Fn>
  void for_owned_in(const FlatRange& r, Fn fn) const {
    for (int u = 0; u < shards_.units(); ++u) {
      const int64_t lo = std::max(r.begin, shards_.owned_begin(u));
      const int64_t hi = std::min(r.begin + r.count, shards_.owned_end(u));
      if (lo < hi) fn(u, lo, hi);
    }
  }

  ZeroShards shards_;
  std::vector<float> grads_;  // this rank's part of every bucket's sum
};

}  // namespace

std::unique_ptr<DataParallel> make_host_data_parallel(int zero_stage, const HostModel& model,
                                                      parallel::Communicator* comm,
                                                      const OptimizerFactory& optimizer,
                                                      const HostDataParallelOptions& options) {
  if (zero_stage != 1) return make_host_ddp(model, comm, optimizer, options);
  return std::make_unique<HostZero1>(model, comm, optimizer, options);
}

}  // namespace aiscale::optim
