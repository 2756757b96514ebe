// How a data-parallel step turns every rank's gradient into the one all ranks apply:
// the mixing (parallel.grad_mixing: average, sum or AdaSum) and the compression
// (parallel.compression: none, top-k or int8, with error feedback). The dense sum goes
// through the communicator's allreduce_sum, and so through the all-reduce algorithm the
// run chose (parallel.allreduce). Used by the trainer for models that leave the
// gradient exchange to it (CPU data parallelism).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "aiscale/parallel/algorithms/compression.h"
#include "aiscale/parallel/comm.h"

namespace aiscale::parallel::algorithms {

struct GradientExchangeOptions {
  std::string mixing = "average";    // average | sum | adasum
  std::string compression = "none";  // none | topk | int8
  double topk_ratio = 0.01;
  std::string allreduce = "library";  // for the record: the communicator's algorithm
  // AdaSum: the start of each segment combined on its own (the parameter tensors).
  std::vector<int64_t> segments;
};

class GradientExchange {
 public:
  // For n gradient values over `comm` (not owned). Fails for a combination it cannot run
  // (AdaSum on a world that is not a power of two, AdaSum with compression).
  GradientExchange(Communicator& comm, GradientExchangeOptions options, int64_t n);
  ~GradientExchange();
  // Combines the ranks' gradients in place: afterwards `grads` holds their sum (average and
  // sum; with compression the sum of what the ranks sent) or AdaSum's combination.
  void exchange(float* grads);
  // What the result is divided by before it is applied: the ranks for "average", 1 for
  // "sum" (the learning rate sees world x the average) and "adasum" (already one
  // gradient's size).
  double divisor() const;
  // Bytes one rank contributes per exchange (the dense gradient: 4 per value) and the
  // bytes it sends over its links per exchange: a ring-ordered all-reduce 2(p-1)/p of the
  // dense bytes, an all-gather of compressed summaries (p-1) x its summary, AdaSum log2(p)
  // whole gradients.
  int64_t payload_bytes() const;
  int64_t wire_bytes() const;
  int64_t dense_bytes() const { return 4 * n_; }
  // The choices and byte counts, for the run's summary and records.
  nlohmann::json describe() const;

 private:
  Communicator& comm_;
  GradientExchangeOptions o_;
  int64_t n_;
  std::unique_ptr<CompressedExchange> compressed_;
};

// Checks of the options alone (also at configuration time): fails naming the key and the fix.
void check_gradient_exchange_options(const GradientExchangeOptions& o);

}  // namespace aiscale::parallel::algorithms
