// Batch sources for the trainer: token shards (through data::TokenLoader) and synthetic
// uniform-random tokens (benchmarks: the speed of a step does not depend on the data).
#pragma once
#include <memory>
#include <string>

#include "aiscale/core/rng.h"
#include "aiscale/train/trainer.h"

namespace aiscale::train {

class SyntheticSource final : public BatchSource {
 public:
  SyntheticSource(int64_t batch, int64_t seq, int64_t vocab, uint64_t seed);
  void next_batch(int32_t* inputs, int32_t* targets) override;
  void rewind() override {
    rng_.reseed(seed_);
    served_ = 0;
  }
  std::string describe() const override;
  // Synthetic data has no order to resume in: the position counts the rows served, and
  // restoring rewinds and draws that many again.
  DataPosition position() const override { return {0, served_ * batch_}; }
  void restore(const DataPosition& p) override;

 private:
  int64_t served_ = 0;
  int64_t batch_, seq_, vocab_;
  uint64_t seed_;
  Rng rng_;
};

// Sets OpenMP and OpenBLAS thread counts; 0 = all cores. Returns the count in use.
int set_cpu_threads(int64_t threads);

}  // namespace aiscale::train

namespace aiscale::data { class TokenLoader; }

namespace aiscale::train {
// Token shards (path or glob) through data::TokenLoader; throws Error naming the pattern
// when nothing matches and when a token is outside the model's vocabulary.
std::unique_ptr<BatchSource> make_shard_source(const std::string& pattern, int64_t batch,
                                               int64_t seq, int rank, int world, uint64_t seed,
                                               bool shuffle, int64_t vocab_size);
}  // namespace aiscale::train
