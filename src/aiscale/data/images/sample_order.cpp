// Epoch orders; semantics in sample_order.h and image_source.h.
#include "aiscale/data/images/sample_order.h"

#include <algorithm>

#include "aiscale/core/error.h"
#include "aiscale/core/permutation.h"
#include "aiscale/core/rng.h"

namespace aiscale::data {
SampleOrder::SampleOrder(int64_t records, int64_t repeat, uint64_t seed, bool shuffle)
    : records_(records), positions_(records * repeat), seed_(seed), shuffle_(shuffle) {
  if (records <= 0) fail("an image store with no records cannot be sampled");
  if (repeat < 1) fail("the repeat factor must be at least 1 (got {})", repeat);
}

int64_t SampleOrder::record_at(int64_t epoch, int64_t position) const {
  AISCALE_CHECK(position >= 0 && position < positions_, "position {} outside [0, {})", position,
                positions_);
  if (!shuffle_) return position % records_;
  // Round keys distinct from the token loader's so the two streams are unrelated.
  const IndexPermutation order(
      static_cast<uint64_t>(positions_),
      mix64(seed_ ^ mix64(static_cast<uint64_t>(epoch) * 0xD1B54A32D192ED03ULL + 0x1A2B)));
  return static_cast<int64_t>(order(static_cast<uint64_t>(position)) % static_cast<uint64_t>(records_));
}

uint64_t augment_seed(uint64_t seed, int64_t epoch, int64_t position) {
  return mix64(mix64(seed + 0x5851F42D4C957F2DULL) ^ mix64(static_cast<uint64_t>(epoch) + 1) ^
               (static_cast<uint64_t>(position) * 0x9E3779B97F4A7C15ULL));
}

}  // namespace aiscale::data

namespace aiscale::data {

BatchCursor::BatchCursor(int64_t positions, int64_t batch_size, int rank, int world_size,
                         const std::string& store)
    : store_(store), batch_size_(batch_size), rank_(rank) {
  if (batch_size <= 0) fail("image source '{}': batch size {} must be positive", store, batch_size);
  if (world_size < 1 || rank < 0 || rank >= world_size)
    fail("image source '{}': rank {} is not in [0, world size {})", store, rank, world_size);
  global_ = batch_size * world_size;
  batches_per_epoch_ = positions / global_;
  if (batches_per_epoch_ == 0)
    fail("image source '{}': an epoch of {} images is less than one global batch of world size "
         "x B = {} x {} = {}; use a smaller batch, a larger repeat factor or more images",
         store, positions, world_size, batch_size, global_);
}

ImageSource::Position BatchCursor::after(ImageSource::Position p) const {
  return p.index + 1 == batches_per_epoch_ ? ImageSource::Position{p.epoch + 1, 0}
                                           : ImageSource::Position{p.epoch, p.index + 1};
}

void BatchCursor::restore(ImageSource::Position position) {
  if (position.epoch < 0 || position.index < 0 || position.index > batches_per_epoch_)
    fail("cannot resume the images of '{}' at epoch {}, batch {}: an epoch has {} global "
         "batches of {} images; was the checkpoint made with other data, batch size, world "
         "size or repeat factor?", store_, position.epoch, position.index, batches_per_epoch_,
         global_);
  if (position.index == batches_per_epoch_) position = {position.epoch + 1, 0};
  position_ = position;
}

}  // namespace aiscale::data
