#include "aiscale/train/sources.h"

#include <omp.h>

#include <cstdlib>
#include <vector>

#include <fmt/format.h>

extern "C" void openblas_set_num_threads(int num_threads);

namespace aiscale::train {

SyntheticSource::SyntheticSource(int64_t batch, int64_t seq, int64_t vocab, uint64_t seed)
    : batch_(batch), seq_(seq), vocab_(vocab), seed_(seed), rng_(seed) {}

void SyntheticSource::restore(const DataPosition& p) {
  rewind();
  std::vector<int32_t> a(batch_ * seq_), b(batch_ * seq_);
  for (int64_t i = 0; i < p.sample / batch_; ++i) next_batch(a.data(), b.data());
}

void SyntheticSource::next_batch(int32_t* inputs, int32_t* targets) {
  ++served_;
  // A random sequence of T+1 tokens per row; targets are the inputs shifted by one.
  for (int64_t b = 0; b < batch_; ++b) {
    int32_t prev = static_cast<int32_t>(rng_.below(static_cast<uint64_t>(vocab_)));
    for (int64_t t = 0; t < seq_; ++t) {
      int32_t next = static_cast<int32_t>(rng_.below(static_cast<uint64_t>(vocab_)));
      inputs[b * seq_ + t] = prev;
      targets[b * seq_ + t] = next;
      prev = next;
    }
  }
}

std::string SyntheticSource::describe() const {
  return fmt::format("synthetic uniform tokens (vocab {})", vocab_);
}

int set_cpu_threads(int64_t threads) {
  // 0: what OMP_NUM_THREADS says (set per rank by `aiscale launch`), else all cores.
  int n = threads > 0                        ? static_cast<int>(threads)
          : std::getenv("OMP_NUM_THREADS") ? omp_get_max_threads()
                                             : omp_get_num_procs();
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
  return n;
}

}  // namespace aiscale::train
