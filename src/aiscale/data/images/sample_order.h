// The order an epoch visits a store's records in, and which positions of it a rank takes:
// the sampling semantics of image_source.h in one place, shared by every image store.
#pragma once
#include <cstdint>

namespace aiscale::data {

class SampleOrder {
 public:
  // `records` N, each visited `repeat` k times per epoch; shuffled: a pseudo-random
  // permutation of the k*N positions keyed by (seed, epoch); otherwise the stored order
  // (position p is record p mod N).
  SampleOrder(int64_t records, int64_t repeat, uint64_t seed, bool shuffle);

  int64_t positions() const { return positions_; }  // k*N
  // The record at `position` of epoch `epoch`'s order.
  int64_t record_at(int64_t epoch, int64_t position) const;

 private:
  int64_t records_, positions_;
  uint64_t seed_;
  bool shuffle_;
};

// Seed of the augmentation random numbers for the image at `position` of epoch `epoch`:
// a function of where the image sits in the order, never of which thread decodes it.
uint64_t augment_seed(uint64_t seed, int64_t epoch, int64_t position);

}  // namespace aiscale::data

#include <string>

#include "aiscale/data/images/image_source.h"

namespace aiscale::data {

// One rank's walk through global batches: which order positions batch `index` of an epoch
// gives this rank, and where the walk stands (ImageSource::Position).
class BatchCursor {
 public:
  // `store` names the data in error messages.
  BatchCursor(int64_t positions, int64_t batch_size, int rank, int world_size,
              const std::string& store);

  int64_t batches_per_epoch() const { return batches_per_epoch_; }
  // The first of this rank's B positions in global batch `index`: index*G + rank*B.
  int64_t first_position(int64_t index) const { return index * global_ + rank_ * batch_size_; }
  ImageSource::Position position() const { return position_; }
  // The position after `p` (the next epoch's first batch after an epoch's last).
  ImageSource::Position after(ImageSource::Position p) const;
  void advance() { position_ = after(position_); }
  // Throws aiscale::Error (naming the store) for a position outside the epochs.
  void restore(ImageSource::Position position);

 private:
  std::string store_;
  int64_t batch_size_, global_, batches_per_epoch_;
  int rank_;
  ImageSource::Position position_;
};

}  // namespace aiscale::data
