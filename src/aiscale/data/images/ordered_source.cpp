#include "aiscale/data/images/ordered_source.h"

namespace aiscale::data {

void OrderedImageSource::serve(int64_t records, int64_t channels, int64_t height, int64_t width,
                               const std::vector<float>& mean, const std::vector<float>& std,
                               const std::string& name) {
  transform_ = std::make_unique<ImageTransform>(
      config_, config_.channels > 0 ? config_.channels : channels,
      config_.height > 0 ? config_.height : height, config_.width > 0 ? config_.width : width,
      mean, std);
  order_ = std::make_unique<SampleOrder>(records, config_.repeat, config_.seed, config_.train);
  cursor_ = std::make_unique<BatchCursor>(order_->positions(), config_.batch_size, config_.rank,
                                          config_.world_size, name);
}

}  // namespace aiscale::data
