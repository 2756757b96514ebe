#include <fmt/format.h>

#include "aiscale/core/error.h"
#include "aiscale/data/token_loader.h"
#include "aiscale/train/sources.h"

namespace aiscale::train {
namespace {

class ShardSource final : public BatchSource {
 public:
  ShardSource(const std::string& pattern, int64_t batch, int64_t seq, int rank, int world,
              uint64_t seed, bool shuffle, int64_t vocab)
      : loader_(pattern, batch, seq, rank, world, seed, shuffle), pattern_(pattern), vocab_(vocab) {
    if (loader_.batches_per_epoch() < 1)
      fail("'{}' holds {} tokens: too few for one global batch of {} rank(s) x {} x {} tokens; "
           "use more text or a smaller batch/sequence", pattern, loader_.total_tokens(), world,
           batch, seq + 1);
  }
  void next_batch(int32_t* inputs, int32_t* targets) override {
    loader_.next_batch(inputs, targets);
    const int64_t n = loader_.batch_size() * loader_.seq_len();
    for (int64_t i = 0; i < n; ++i)
      if (targets[i] >= vocab_ || inputs[i] >= vocab_)
        fail("'{}' contains token id {} but the model's vocabulary has {} entries: set "
             "model.vocab_size to the tokenizer's (50257 for gpt2, 256 for byte)", pattern_,
             std::max(inputs[i], targets[i]), vocab_);
  }
  void rewind() override { loader_.reset(); }
  DataPosition position() const override {
    auto p = loader_.position();
    return {p.epoch, p.index};
  }
  void restore(const DataPosition& p) override { loader_.restore({p.epoch, p.index}); }
  std::string describe() const override {
    return fmt::format("{} ({} shard(s), {} tokens, {} batches/epoch)", pattern_,
                       loader_.shard_paths().size(), loader_.total_tokens(),
                       loader_.batches_per_epoch());
  }

 private:
  data::TokenLoader loader_;
  std::string pattern_;
  int64_t vocab_;
};

}  // namespace

std::unique_ptr<BatchSource> make_shard_source(const std::string& pattern, int64_t batch,
                                               int64_t seq, int rank, int world, uint64_t seed,
                                               bool shuffle, int64_t vocab_size) {
  return std::make_unique<ShardSource>(pattern, batch, seq, rank, world, seed, shuffle, vocab_size);
}

}  // namespace aiscale::train
