#include "aiscale/parallel/algorithms/gradient_exchange.h"

#include "aiscale/core/error.h"
#include "aiscale/parallel/algorithms/adasum.h"

namespace aiscale::parallel::algorithms {

void check_gradient_exchange_options(const GradientExchangeOptions& o) {
  if (o.mixing != "average" && o.mixing != "sum" && o.mixing != "adasum")
    fail("unknown parallel.grad_mixing '{}': use average, sum or adasum", o.mixing);
  if (o.compression != "none" && o.compression != "topk" && o.compression != "int8")
    fail("unknown parallel.compression '{}': use none, topk or int8", o.compression);
  if (o.mixing == "adasum" && o.compression != "none")
    fail("parallel.grad_mixing = \"adasum\" combines whole gradients pairwise and cannot take "
         "compressed ones: set parallel.compression = \"none\", or parallel.grad_mixing = "
         "\"average\" with compression");
}

GradientExchange::GradientExchange(Communicator& comm, GradientExchangeOptions options, int64_t n)
    : comm_(comm), o_(std::move(options)), n_(n) {
  check_gradient_exchange_options(o_);
  if (o_.mixing == "adasum" && !adasum_supports(comm_.world()))
    fail("parallel.grad_mixing = \"adasum\" combines ranks pairwise by recursive doubling, which "
         "needs a power-of-two number of data-parallel ranks, not {}: launch 2, 4, 8, ... ranks, "
         "or use parallel.grad_mixing = \"average\"", comm_.world());
  if (o_.compression != "none") compressed_ = std::make_unique<CompressedExchange>(o_.compression, n_, o_.topk_ratio);
}

GradientExchange::~GradientExchange() = default;

void GradientExchange::exchange(float* grads) {
  if (comm_.world() <= 1) return;
  if (compressed_) compressed_->exchange(comm_, grads);
  else if (o_.mixing == "adasum") adasum_allreduce(comm_, grads, n_, o_.segments);
  else comm_.allreduce_sum(grads, n_);
}

double GradientExchange::divisor() const {
  return o_.mixing == "average" ? static_cast<double>(comm_.world()) : 1.0;
}

int64_t GradientExchange::payload_bytes() const {
  return compressed_ ? compressed_->payload_bytes() : dense_bytes();
}

int64_t GradientExchange::wire_bytes() const {
  const int64_t p = comm_.world();
  if (p <= 1) return 0;
  if (compressed_) return (p - 1) * compressed_->payload_bytes();
  if (o_.mixing == "adasum") {
    int64_t rounds = 0;
    for (int64_t d = 1; d < p; d *= 2) ++rounds;
    return rounds * dense_bytes();
  }
  return 2 * (p - 1) * dense_bytes() / p;
}

nlohmann::json GradientExchange::describe() const {
  nlohmann::json j = {{"allreduce", o_.allreduce},
                      {"grad_mixing", o_.mixing},
                      {"compression", o_.compression},
                      {"grad_dense_bytes", dense_bytes()},
                      {"grad_payload_bytes", payload_bytes()},
                      {"grad_wire_bytes_per_step", wire_bytes()}};
  if (o_.compression == "topk") {
    j["topk_ratio"] = o_.topk_ratio;
    j["topk_values"] = topk_count(n_, o_.topk_ratio);
  }
  if (o_.compression == "int8") j["int8_bucket"] = kInt8Bucket;
  return j;
}

}  // namespace aiscale::parallel::algorithms
