// From a decoded image to one normalised training or validation sample: crop box choice
// (random-resized-crop, centre crop), bilinear resampling, channel conversion,
// normalisation and layout, in one pass over the output pixels.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "aiscale/data/images/image_source.h"

namespace aiscale::data {

// Decoded pixels, rows of width * channels bytes (channels 1 grey, 2 grey+alpha, 3 RGB,
// 4 RGBA).
struct PixelView {
  const uint8_t* pixels = nullptr;
  int64_t width = 0, height = 0, channels = 0;
};

// A region of the source, in source pixels (fractional), and whether to mirror it.
struct CropBox {
  double x = 0, y = 0, width = 0, height = 0;
  bool flip = false;
};

enum class Augment { crop_flip, flip, none };
Augment parse_augment(const std::string& name);  // throws aiscale::Error for other names

// What every image of a source goes through, resolved once from ImageSourceConfig and the
// store's metadata.
class ImageTransform {
 public:
  // stored_mean/std: the store's per-channel statistics in `channels` channels, used where
  // the config leaves mean/std empty.
  ImageTransform(const ImageSourceConfig& config, int64_t channels, int64_t height, int64_t width,
                 const std::vector<float>& stored_mean, const std::vector<float>& stored_std);

  int64_t channels() const { return channels_; }
  int64_t height() const { return height_; }
  int64_t width() const { return width_; }
  int64_t floats_per_image() const { return channels_ * height_ * width_; }

  // The crop for the image at `position` of epoch `epoch` (train: random from
  // augment_seed; validation: centred).
  CropBox crop_for(int64_t src_width, int64_t src_height, int64_t epoch, int64_t position) const;
  // Writes one image (floats_per_image() floats, in the config's layout) to `out`.
  void apply(const PixelView& src, const CropBox& box, float* out) const;

 private:
  int64_t channels_, height_, width_;
  ImageLayout layout_;
  bool train_;
  Augment augment_;
  float center_crop_;
  uint64_t seed_;
  std::vector<float> scale_, bias_;  // per output channel: value/255/std - mean/std
};

}  // namespace aiscale::data
