#include "aiscale/train/managed_models.h"

#include <algorithm>
#include <vector>

#include "aiscale/ops/ops.h"
#include "aiscale/parallel/algorithms/gradient_exchange.h"

namespace aiscale::train {
namespace {

namespace dp = optim;

// A GPT model that runs its own exchange and AdamW (or, on a GPU without a device
// communicator, whose device gradient buffer the communicator sums as a whole).
class ManagedGpt final : public dp::DataParallel {
 public:
  ManagedGpt(const TrainConfig& c, nn::GptModel& model, parallel::Communicator& comm,
             int data_world)
      : c_(c), model_(model), comm_(comm), data_world_(data_world) {
    if (comm.world() > 1 && !model.data_parallel()) {
      parallel::algorithms::GradientExchangeOptions eo = host_data_parallel_options(c).exchange;
      for (const auto& t : model.param_tensors()) eo.segments.push_back(t.offset);
      exchange_ = std::make_unique<parallel::algorithms::GradientExchange>(comm, eo, model.num_params());
    }
  }
  std::string name() const override { return "model"; }
  void begin_micro_step(bool last) override { model_.set_gradient_sync(last); }
  void reduce_gradients() override {
    if (exchange_) exchange_->exchange(model_.grad_buffer());
  }
  double divisor() const override {
    return grad_mixing_of(c_) == "average" ? static_cast<double>(data_world_) : 1.0;
  }
  double grad_sum_squares() override { return model_.grad_sum_squares(); }
  void step(const optim::StepParams& p) override {
    ops::AdamWParams hp;
    hp.lr = static_cast<float>(p.lr);
    hp.beta1 = static_cast<float>(c_.beta1);
    hp.beta2 = static_cast<float>(c_.beta2);
    hp.eps = static_cast<float>(c_.eps);
    hp.weight_decay = static_cast<float>(c_.weight_decay);
    hp.step = p.step;
    hp.grad_scale = p.grad_scale;
    model_.update(hp);
  }
  bool collective_state() const override { return model_.collective_state(); }
  void get_params(float* out) override { model_.get_params(out); }
  void set_params(const float* in) override { model_.set_params(in); }
  std::vector<std::string> state_names() const override { return {"m", "v"}; }
  void get_state(int k, float* out) override {
    // The model gives both moments at once (a collective when sharded): v is kept from the
    // call for m, which a checkpoint makes first.
    const size_t n = static_cast<size_t>(model_.num_params());
    if (k == 0) {
      pending_v_.resize(n);
      model_.get_optimizer_state(out, pending_v_.data());
      return;
    }
    if (pending_v_.size() == n) {
      std::copy(pending_v_.begin(), pending_v_.end(), out);
      pending_v_.clear();
      return;
    }
    std::vector<float> m(n);
    model_.get_optimizer_state(m.data(), out);
  }
  void set_state(int k, const float* in) override {
    // Both moments are set together: the first call keeps m, the second sets both.
    if (k == 0) {
      pending_m_.assign(in, in + model_.num_params());
      return;
    }
    model_.set_optimizer_state(pending_m_.data(), in);
    pending_m_.clear();
  }
  bool streams_state() const override { return model_.streams_state(); }
  void get_params_range(const FlatRange& r, float* out) override {
    model_.get_params_range(r.begin, r.count, out);
  }
  void set_params_range(const FlatRange& r, const float* in) override {
    model_.set_params_range(r.begin, r.count, in);
  }
  void get_state_range(int k, const FlatRange& r, float* out) override {
    model_.get_optimizer_state_range(k, r.begin, r.count, out);
  }
  void set_state_range(int k, const FlatRange& r, const float* in) override {
    model_.set_optimizer_state_range(k, r.begin, r.count, in);
  }
  size_t optimizer_state_bytes() const override { return model_.optimizer_state_bytes(); }
  int64_t wire_bytes() const override { return exchange_ ? exchange_->wire_bytes() : 0; }
  nlohmann::json describe() const override {
    nlohmann::json j = exchange_ ? exchange_->describe()
                                 : nlohmann::json{{"allreduce", c_.allreduce},
                                                  {"grad_mixing", grad_mixing_of(c_)},
                                                  {"compression", c_.compression},
                                                  {"gradient_sync", comm_.world() > 1 ? "in the model"
                                                                                      : "none (one rank)"}};
    j["data_parallel"] = name();
    j["optimizer_state_bytes"] = optimizer_state_bytes();
    return j;
  }

 private:
  const TrainConfig& c_;
  nn::GptModel& model_;
  parallel::Communicator& comm_;
  int data_world_;
  std::unique_ptr<parallel::algorithms::GradientExchange> exchange_;
  std::vector<float> pending_m_, pending_v_;
};

}  // namespace

optim::HostDataParallelOptions host_data_parallel_options(const TrainConfig& c) {
  optim::HostDataParallelOptions o;
  o.bucket_mib = c.bucket_mib;
  o.exchange.mixing = grad_mixing_of(c);
  o.exchange.compression = c.compression;
  o.exchange.topk_ratio = c.topk_ratio;
  o.exchange.allreduce = c.allreduce;
  return o;
}

std::unique_ptr<optim::DataParallel> make_data_parallel(const TrainConfig& c,
                                                               nn::GptModel& model,
                                                               parallel::Communicator& comm,
                                                               int data_world) {
  // Device buffers, or a model that exchanges its gradients itself: the model's own path.
  if (c.device != "cpu" || model.synchronizes_gradients())
    return std::make_unique<ManagedGpt>(c, model, comm, data_world);
  optim::AdamWOptions ao;
  ao.beta1 = c.beta1;
  ao.beta2 = c.beta2;
  ao.eps = c.eps;
  ao.weight_decay = c.weight_decay;
  const std::string backend = model.options().cpu_backend;
  const auto& tensors = model.param_tensors();
  auto optimizer = [ao, backend, &tensors](int64_t n) { return optim::make_adamw(n, ao, tensors, backend); };
  const dp::HostDataParallelOptions o = host_data_parallel_options(c);
  parallel::Communicator* data = comm.world() > 1 ? &comm : nullptr;
  return dp::make_host_data_parallel(c.zero_stage, host_model(model), data, optimizer, o);
}

}  // namespace aiscale::train
