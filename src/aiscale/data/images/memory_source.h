// An ImageSource over decoded images held in memory (an IDX set, images a test made):
// the sampling, augmentation and normalisation of every image store (image_source.h),
// without the decoding or prefetching. Images are transformed inside next_batch() on
// config.threads OpenMP threads (0: OpenMP's default); results do not depend on the
// thread count.
#pragma once
#include <memory>
#include <string>

#include "aiscale/data/images/image_array.h"
#include "aiscale/data/images/image_source.h"
#include "aiscale/data/images/ordered_source.h"
#include "aiscale/data/images/sample_order.h"
#include "aiscale/data/images/transform.h"

namespace aiscale::data {

// Per-channel mean and standard deviation of `images` in [0, 1] units (what
// pack-images stores and ImageSourceConfig's empty mean/std stand for).
void channel_statistics(const ImageArray& images, std::vector<float>& mean, std::vector<float>& std);

class MemoryImageSource final : public OrderedImageSource {
 public:
  // num_classes 0: the largest label + 1. config.path is only a name for messages.
  // Throws aiscale::Error for a label outside [0, num_classes) or an inconsistent array.
  MemoryImageSource(ImageArray images, int64_t num_classes, const ImageSourceConfig& config);

  int64_t num_classes() const override { return num_classes_; }
  int64_t records() const override { return images_.count; }
  void next_batch(ImageBatch& out) override;
  void restore(Position position) override { cursor_->restore(position); }
  ImageSourceStats stats() const override { return stats_; }

 private:
  ImageArray images_;
  int64_t num_classes_;
  ImageSourceStats stats_;
};

}  // namespace aiscale::data
