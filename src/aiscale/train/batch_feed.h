// What the trainer reads: one micro-batch at a time as an nn::Batch, from a token source
// (BatchSource: shards, synthetic tokens) or an image source (vision_sources.h), with the
// position to checkpoint and resume.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "aiscale/nn/model.h"

namespace aiscale::train {

// How far a batch source has read: the first `sample` samples (windows) of epoch `epoch`'s
// order have been served, by all data-parallel ranks together. Counted in samples, not
// batches, so it means the same whatever the number of data-parallel ranks, the batch size
// or the accumulation: a checkpoint resumes in another layout at the same sample. (An image
// feed counts the global batches of its epoch.) A source moves to the next epoch right after
// serving an epoch's last batch.
struct DataPosition {
  int64_t epoch = 0;
  int64_t sample = 0;
  bool operator==(const DataPosition&) const = default;
};

// Where token batches come from: token shards, or synthetic tokens for benchmarks.
class BatchSource {
 public:
  virtual ~BatchSource() = default;
  // Fills B*T inputs and B*T targets (next tokens).
  virtual void next_batch(int32_t* inputs, int32_t* targets) = 0;
  // Rewinds to the start (validation passes always see the same batches).
  virtual void rewind() = 0;
  virtual std::string describe() const = 0;
  virtual DataPosition position() const = 0;
  virtual void restore(const DataPosition& p) = 0;
};

class BatchFeed {
 public:
  virtual ~BatchFeed() = default;
  // The next micro-batch; valid until the next call.
  virtual const nn::Batch& next() = 0;
  // Back to the start (every validation pass sees the same batches).
  virtual void rewind() = 0;
  virtual DataPosition position() const = 0;
  // Samples in each batch this rank reads.
  virtual int64_t samples_per_batch() const = 0;
  // Batches of a validation pass for train.eval_batches = `requested`.
  virtual int64_t eval_batches(int64_t requested) const { return requested; }
  // Records skipped as corrupt so far (image stores with data.skip_corrupt).
  virtual int64_t skipped_corrupt() const { return 0; }
};

// Token batches (B x T inputs and targets) from a BatchSource (not owned).
class TokenFeed final : public BatchFeed {
 public:
  TokenFeed(BatchSource& source, int64_t batch, int64_t seq);
  const nn::Batch& next() override;
  void rewind() override;
  DataPosition position() const override;
  int64_t samples_per_batch() const override { return batch_; }

 private:
  BatchSource& source_;
  int64_t batch_;
  std::vector<int32_t> inputs_, targets_;
  nn::Batch out_;
};

}  // namespace aiscale::train
