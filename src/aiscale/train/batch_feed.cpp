#include "aiscale/train/batch_feed.h"

namespace aiscale::train {

TokenFeed::TokenFeed(BatchSource& source, int64_t batch, int64_t seq)
    : source_(source), batch_(batch), inputs_(size_t(batch * seq)), targets_(size_t(batch * seq)) {
  out_.tokens = inputs_.data();
  out_.targets = targets_.data();
  out_.n = batch;
}

const nn::Batch& TokenFeed::next() {
  source_.next_batch(inputs_.data(), targets_.data());
  return out_;
}

void TokenFeed::rewind() { source_.rewind(); }
DataPosition TokenFeed::position() const { return source_.position(); }

}  // namespace aiscale::train
