// Data parallelism outside the model, for a host model (fp32 buffers in host memory,
// described by its tensors: HostModel) that does not synchronise its gradients itself: after the step's last micro-step
// (gradient accumulation's earlier micro-steps only accumulate, DDP's no_sync) the wrapper
// sums the ranks' gradients, takes the norm, and runs the optimizer (optim/optimizer.h):
//
//   ddp    every rank holds the whole optimizer state; the gradients are exchanged whole
//          (parallel/algorithms/gradient_exchange.h): a dense sum is the communicator's
//          all-reduce, which travels in buckets of its own (MPI: 25 MiB, all posted at
//          once), AdaSum and compression combine whole gradients; every rank updates
//          every value.
//   zero1  ZeRO-1: buckets (plan_buckets over the model's tensors in backward's order,
//          parallel.bucket_mib) are reduce-scattered, each rank keeps the summed
//          gradients and the optimizer state of its 1/world of every bucket
//          (optim/zero_shards.h), updates that part of the parameters (fp32: the working
//          copy is the master) and all-gathers them.
//
// One rank (no communicator, or a world of one) is ddp without an exchange. The average
// (parallel.grad_mixing = "average") is folded into the optimizer's grad_scale: the trainer
// divides by divisor(), as it divides by the norm for clipping.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "aiscale/core/param_tensor.h"
#include "aiscale/optim/optimizer.h"
#include "aiscale/parallel/algorithms/gradient_exchange.h"
#include "aiscale/parallel/comm.h"

namespace aiscale::profile {
class OpProfiler;
}

namespace aiscale::optim {

// A host model's buffers as the wrappers see them (not owned; they outlive the wrapper):
// its flat parameters and gradients and the tensors that tile them (nn::Model gives them).
struct HostModel {
  float* params = nullptr;
  float* grads = nullptr;
  int64_t size = 0;
  const std::vector<ParamTensor>* tensors = nullptr;
};

// What the trainer calls for the data-parallel side of a step, for any model; implemented
// by the host wrappers below and, for models that synchronise themselves, by a wrapper
// that forwards to the model's own exchange and update (train/managed_models.h).
class DataParallel {
 public:
  virtual ~DataParallel() = default;
  // "ddp", "zero1", or "model" (the model synchronises itself); in every step record.
  virtual std::string name() const = 0;
  // Before each micro-step: whether it is the step's last (the one that synchronises).
  virtual void begin_micro_step(bool last) { (void)last; }
  // After the last micro-step's backward: the gradients summed over the ranks.
  virtual void reduce_gradients() = 0;
  // What the summed gradient is divided by: the data-parallel ranks for "average", else 1.
  virtual double divisor() const = 0;
  // Sum of squares of the summed gradients (before divisor()); the same on every rank.
  virtual double grad_sum_squares() = 0;
  // False where the gradients are not read for a norm (a GPU ResNet's stay on the device):
  // the trainer then neither clips nor records a norm.
  virtual bool measures_grad_norm() const { return true; }
  // The optimizer step (p.grad_scale already holds clip / divisor()); afterwards every
  // rank holds the new parameters.
  virtual void step(const StepParams& p) = 0;
  virtual void set_profiler(profile::OpProfiler* profiler) { (void)profiler; }

  // Whole-model copies for checkpoints, in the model's flat order. With collective_state()
  // every rank must call the getters together (each holds a shard).
  virtual bool collective_state() const = 0;
  virtual void get_params(float* out) = 0;
  virtual void set_params(const float* in) = 0;
  virtual std::vector<std::string> state_names() const = 0;  // "m", "v" / "momentum"
  virtual void get_state(int k, float* out) = 0;
  virtual void set_state(int k, const float* in) = 0;

  // The same state a range at a time, [r.begin, r.begin + r.count) of the flat model of
  // r.total values: checkpoints stream the model through these (train/checkpoint_stream.h),
  // so that no rank holds more than one range of whole-model values. With
  // collective_state() every rank calls the getters together, with the same ranges. The
  // setters are local (each rank keeps its part of the range) and are called in ascending
  // order over the whole model, params first, then each state.
  // The defaults go through the whole-vector methods above (a temporary of r.total
  // values; a setter applies the vector with the range that ends the model): a wrapper
  // that holds its state in pieces overrides them and says so with streams_state().
  struct FlatRange {
    int64_t begin = 0, count = 0, total = 0;
    bool last() const { return begin + count == total; }
  };
  virtual bool streams_state() const { return false; }
  virtual void get_params_range(const FlatRange& r, float* out);
  virtual void set_params_range(const FlatRange& r, const float* in);
  virtual void get_state_range(int k, const FlatRange& r, float* out);
  virtual void set_state_range(int k, const FlatRange& r, const float* in);

  // Bytes of optimizer state this rank holds (the moments or momentum; a shard with ZeRO-1).
  virtual size_t optimizer_state_bytes() const = 0;
  // Bytes a rank sends per step for the gradients (0 on one rank).
  virtual int64_t wire_bytes() const = 0;
  // The exchange for the run's summary: the wrapper, all-reduce, mixing, compression, bytes.
  virtual nlohmann::json describe() const = 0;

 private:
  // The defaults' whole vector being filled by the setters (empty between restores).
  std::vector<float> pending_;
};

struct HostDataParallelOptions {
  double bucket_mib = 25;  // ZeRO-1's buckets (parallel.bucket_mib)
  parallel::algorithms::GradientExchangeOptions exchange;  // mixing, compression, all-reduce's name
};

// The optimizer of a piece of `state_size` values (the whole model, or a rank's shard).
using OptimizerFactory = std::function<std::unique_ptr<Optimizer>(int64_t state_size)>;

// `comm` may be null (one rank); the model's buffers and comm must outlive the wrapper.
std::unique_ptr<DataParallel> make_host_ddp(const HostModel& model, parallel::Communicator* comm,
                                            const OptimizerFactory& optimizer,
                                            const HostDataParallelOptions& options);
// zero_stage 1: zero1, which fails (naming parallel.grad_mixing / parallel.compression) for
// AdaSum or compression: a reduce-scatter sums dense gradients. Any other stage: ddp.
std::unique_ptr<DataParallel> make_host_data_parallel(int zero_stage, const HostModel& model,
                                                      parallel::Communicator* comm,
                                                      const OptimizerFactory& optimizer,
                                                      const HostDataParallelOptions& options);

// The model's tensors as the gradient order of a host backward (the last tensor first, one
// segment each) and the buckets planned over it: unit boundaries in flat order, U + 1.
std::vector<int64_t> host_bucket_bounds(const HostModel& model, double bucket_mib);

}  // namespace aiscale::optim
