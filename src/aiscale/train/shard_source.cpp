#include <fmt/format.h>

#include "aiscale/core/error.h"
#include "aiscale/core/log.h"
#include "aiscale/core/timer.h"
#include "aiscale/data/token_loader.h"
#include "aiscale/train/sources.h"

namespace aiscale::train {
namespace {

class ShardSource final : public BatchSource {
 public:
  ShardSource(const std::string& pattern, int64_t batch, int64_t seq, int rank, int world,
              uint64_t seed, bool shuffle, int64_t vocab)
      : loader_(pattern, batch, seq, rank, world, seed, shuffle), pattern_(pattern) {
    if (loader_.batches_per_epoch() < 1)
      fail("'{}' holds {} tokens: too few for one global batch of {} rank(s) x {} x {} tokens; "
           "use more text or a smaller batch/sequence", pattern, loader_.total_tokens(), world,
           batch, seq + 1);
    // (Training shards are read shuffled, validation shards in order.)
    check_token_ids(vocab, shuffle ? "data.train" : "data.val");
  }
  void next_batch(int32_t* inputs, int32_t* targets) override {
    loader_.next_batch(inputs, targets);
  }
  void rewind() override { loader_.reset(); }
  DataPosition position() const override {
    auto p = loader_.position();
    return {p.epoch, p.sample};
  }
  void restore(const DataPosition& p) override { loader_.restore({p.epoch, p.sample}); }
  std::string describe() const override {
    return fmt::format("{} ({} shard(s), {} tokens, {} batches/epoch)", pattern_,
                       loader_.shard_paths().size(), loader_.total_tokens(),
                       loader_.batches_per_epoch());
  }

 private:
  // Every token of every shard against the vocabulary, once, before the first step: a
  // shard of another tokenizer is refused now, not when one of its batches is drawn (and
  // then again on every resume).
  void check_token_ids(int64_t vocab, const char* key) const {
    Timer timer;
    const auto bad = loader_.find_token_outside(vocab);
    log::debug("token ids of '{}' ({} tokens) checked against the vocabulary of {} in {:.1f} ms",
               pattern_, loader_.total_tokens(), vocab, timer.seconds() * 1e3);
    if (!bad) return;
    fail("{} = '{}': token shard '{}' holds token id {} at token offset {} (its largest id is {}), but the "
         "model's vocabulary has {} ids (0..{}): the shard was tokenized for another vocabulary. "
         "Re-tokenize the text with the model's tokenizer (aiscale data tokenize --tokenizer "
         "byte|gpt2|TOKENIZER.json|MODEL.model, and data.tokenizer to match), or, for a new run, set model.vocab_size = {} "
         "or more (50257 for gpt2 shards; a resumed run keeps its checkpoint's vocabulary)",
         key, pattern_, bad->shard.string(), bad->id, bad->offset, bad->max_id, vocab, vocab - 1,
         bad->max_id + 1);
  }

  data::TokenLoader loader_;
  std::string pattern_;
};

}  // namespace

std::unique_ptr<BatchSource> make_shard_source(const std::string& pattern, int64_t batch,
                                               int64_t seq, int rank, int world, uint64_t seed,
                                               bool shuffle, int64_t vocab_size) {
  return std::make_unique<ShardSource>(pattern, batch, seq, rank, world, seed, shuffle, vocab_size);
}

}  // namespace aiscale::train
