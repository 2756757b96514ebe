// Where a vision run's images come from (data.kind): an LMDB store written by
// `aiscale data pack-images`, MNIST-style IDX files, or a synthetic set generated in memory
// (benchmarks and tests). Every kind serves batches through data::ImageSource with the same
// sampling semantics (data/images/image_source.h).
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "aiscale/data/images/image_source.h"
#include "aiscale/train/batch_feed.h"
#include "aiscale/train/vision_config.h"

namespace aiscale::train {

// Synthetic labelled images: image i of class i mod classes is that class's fixed random
// pattern plus noise, so a classifier can learn them; generated on demand from (seed, i),
// nothing stored. Served in a fresh permutation per epoch (train) or in order.
struct SyntheticImagesSpec {
  int64_t images = 1024, channels = 3, height = 32, width = 32, classes = 10;
  int64_t batch_size = 32;
  int rank = 0, world_size = 1;
  uint64_t seed = 0;
  bool train = true;
  float noise = 0.5f;
};
std::unique_ptr<data::ImageSource> make_synthetic_images(const SyntheticImagesSpec& spec);

// The labels file beside an IDX images file: ...-images-idx3-ubyte[.gz] ->
// ...-labels-idx1-ubyte[.gz]. Throws Error for a name without "images-idx3".
std::string idx_labels_path(const std::string& images_path);

// The training (train = true) or validation source of this rank for `c`; the validation
// source is null when c.val_data is empty (synthetic: a second, smaller set).
std::unique_ptr<data::ImageSource> open_vision_source(const VisionTrainConfig& c, bool train,
                                                      int rank, int world_size);

// An image source as the trainer's feed: NCHW batches (the ResNet's layout; an NHWC source
// is refused), the position in global batches of the epoch, validation passes of
// train.eval_batches batches (0: the whole set), corrupt records skipped.
class ImageFeed final : public BatchFeed {
 public:
  explicit ImageFeed(data::ImageSource& source) : source_(source) {}
  const nn::Batch& next() override;
  void rewind() override { source_.restore({0, 0}); }
  DataPosition position() const override {
    const data::ImageSource::Position p = source_.position();
    return {p.epoch, p.index};
  }
  int64_t samples_per_batch() const override { return source_.batch_size(); }
  int64_t eval_batches(int64_t requested) const override;
  int64_t skipped_corrupt() const override { return source_.stats().skipped_corrupt; }

 private:
  data::ImageSource& source_;
  data::ImageBatch batch_;
  nn::Batch out_;
};

}  // namespace aiscale::train
