// The in-memory image source; semantics in image_source.h.
#include "aiscale/data/images/memory_source.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "aiscale/core/error.h"

namespace aiscale::data {

void channel_statistics(const ImageArray& images, std::vector<float>& mean, std::vector<float>& std) {
  const int64_t c = images.channels;
  std::vector<double> sum(c, 0.0), sum_sq(c, 0.0);
  const int64_t pixels = images.count * images.height * images.width;
  for (int64_t p = 0; p < pixels; ++p)
    for (int64_t k = 0; k < c; ++k) {
      const double v = images.pixels[p * c + k] / 255.0;
      sum[k] += v;
      sum_sq[k] += v * v;
    }
  mean.assign(c, 0.0f);
  std.assign(c, 1.0f);
  for (int64_t k = 0; k < c && pixels > 0; ++k) {
    const double m = sum[k] / static_cast<double>(pixels);
    const double var = std::max(0.0, sum_sq[k] / static_cast<double>(pixels) - m * m);
    mean[k] = static_cast<float>(m);
    std[k] = var > 0 ? static_cast<float>(std::sqrt(var)) : 1.0f;
  }
}

MemoryImageSource::MemoryImageSource(ImageArray images, int64_t num_classes,
                                     const ImageSourceConfig& config)
    : OrderedImageSource(config), images_(std::move(images)), num_classes_(num_classes) {
  const std::string name = config_.path.empty() ? "in-memory images" : config_.path;
  const ImageArray& a = images_;
  if (a.count <= 0 || a.height <= 0 || a.width <= 0 || a.channels < 1 || a.channels > 4 ||
      static_cast<int64_t>(a.pixels.size()) != a.count * a.height * a.width * a.channels ||
      static_cast<int64_t>(a.labels.size()) != a.count)
    fail("image source '{}': {} images of {}x{}x{} need {} pixel bytes and {} labels, got {} and {}",
         name, a.count, a.height, a.width, a.channels, a.count * a.height * a.width * a.channels,
         a.count, a.pixels.size(), a.labels.size());
  if (num_classes_ <= 0)
    num_classes_ = *std::max_element(a.labels.begin(), a.labels.end()) + 1;
  for (int64_t i = 0; i < a.count; ++i)
    if (a.labels[i] < 0 || a.labels[i] >= num_classes_)
      fail("image source '{}': image {} has label {}, outside [0, {}); the labels do not "
           "match the number of classes", name, i, a.labels[i], num_classes_);
  std::vector<float> mean, stdev;
  if (config_.mean.empty() || config_.std.empty()) channel_statistics(a, mean, stdev);
  serve(a.count, a.channels >= 3 ? 3 : 1, a.height, a.width, mean, stdev, name);
}

void MemoryImageSource::next_batch(ImageBatch& out) {
  const auto start = std::chrono::steady_clock::now();
  const int64_t B = config_.batch_size, per_image = transform_->floats_per_image();
  out.n = B;
  out.channels = transform_->channels();
  out.height = transform_->height();
  out.width = transform_->width();
  out.layout = config_.layout;
  out.pixels.resize(B * per_image);
  out.labels.resize(B);
  const Position at = cursor_->position();
  const int64_t first = cursor_->first_position(at.index);
  const ImageArray& a = images_;
  const int64_t image_bytes = a.height * a.width * a.channels;
  const int threads = config_.threads > 0 ? config_.threads : omp_get_max_threads();
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t j = 0; j < B; ++j) {
    const int64_t record = order_->record_at(at.epoch, first + j);
    const PixelView view{a.pixels.data() + record * image_bytes, a.width, a.height, a.channels};
    const CropBox box = transform_->crop_for(a.width, a.height, at.epoch, first + j);
    transform_->apply(view, box, out.pixels.data() + j * per_image);
    out.labels[j] = a.labels[record];
  }
  cursor_->advance();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  stats_.images += B;
  stats_.decode_seconds += seconds;
  stats_.wait_seconds += seconds;
}

}  // namespace aiscale::data
