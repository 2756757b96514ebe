// What the image sources share (memory_source.h, lmdb_source.h): the config, the transform
// to the served shape, the order an epoch visits the records in and the rank's batch cursor.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "aiscale/data/images/image_source.h"
#include "aiscale/data/images/sample_order.h"
#include "aiscale/data/images/transform.h"

namespace aiscale::data {

class OrderedImageSource : public ImageSource {
 public:
  int64_t channels() const override { return transform_->channels(); }
  int64_t height() const override { return transform_->height(); }
  int64_t width() const override { return transform_->width(); }
  int64_t batch_size() const override { return config_.batch_size; }
  int64_t batches_per_epoch() const override { return cursor_->batches_per_epoch(); }
  Position position() const override { return cursor_->position(); }

 protected:
  explicit OrderedImageSource(const ImageSourceConfig& config) : config_(config) {}

  // Serves `records` records as images of channels × height × width (config's sizes where
  // set), normalised by mean/std where the config gives none; `name` names the data in
  // messages.
  void serve(int64_t records, int64_t channels, int64_t height, int64_t width,
             const std::vector<float>& mean, const std::vector<float>& std, const std::string& name);

  ImageSourceConfig config_;
  std::unique_ptr<ImageTransform> transform_;
  std::unique_ptr<SampleOrder> order_;
  std::unique_ptr<BatchCursor> cursor_;
};

}  // namespace aiscale::data
