// Crop, resample, convert, normalise; see transform.h.
#include "aiscale/data/images/transform.h"

#include <algorithm>
#include <cmath>

#include "aiscale/core/error.h"
#include "aiscale/core/rng.h"
#include "aiscale/data/images/sample_order.h"

namespace aiscale::data {
namespace {

// torchvision's RandomResizedCrop defaults, the field's standard for ImageNet training.
constexpr double kMinScale = 0.08, kMaxScale = 1.0;
constexpr double kMinRatio = 3.0 / 4.0, kMaxRatio = 4.0 / 3.0;
constexpr int kCropAttempts = 10;

// Source sample positions and weights for one output axis (bilinear, pixel centres).
struct AxisTaps {
  std::vector<int64_t> lo, hi;
  std::vector<float> w_hi;
};

AxisTaps axis_taps(int64_t out_size, double start, double length, int64_t src_size, bool mirror) {
  AxisTaps taps;
  taps.lo.resize(out_size);
  taps.hi.resize(out_size);
  taps.w_hi.resize(out_size);
  const double step = length / static_cast<double>(out_size);
  for (int64_t o = 0; o < out_size; ++o) {
    const int64_t oo = mirror ? out_size - 1 - o : o;
    double s = start + (static_cast<double>(oo) + 0.5) * step - 0.5;
    s = std::clamp(s, 0.0, static_cast<double>(src_size - 1));
    const int64_t lo = static_cast<int64_t>(std::floor(s));
    taps.lo[o] = lo;
    taps.hi[o] = std::min(lo + 1, src_size - 1);
    taps.w_hi[o] = static_cast<float>(s - static_cast<double>(lo));
  }
  return taps;
}

}  // namespace

Augment parse_augment(const std::string& name) {
  if (name == "crop-flip") return Augment::crop_flip;
  if (name == "flip") return Augment::flip;
  if (name == "none") return Augment::none;
  fail("unknown image augmentation '{}': use crop-flip, flip or none", name);
}

ImageTransform::ImageTransform(const ImageSourceConfig& config, int64_t channels, int64_t height,
                               int64_t width, const std::vector<float>& stored_mean,
                               const std::vector<float>& stored_std)
    : channels_(channels), height_(height), width_(width), layout_(config.layout),
      train_(config.train), augment_(parse_augment(config.augment)),
      center_crop_(config.center_crop), seed_(config.seed) {
  if (channels != 1 && channels != 3)
    fail("images can be served with 1 (grey) or 3 (RGB) channels, not {}", channels);
  if (height <= 0 || width <= 0) fail("served image size {}x{} must be positive", height, width);
  if (center_crop_ < 0 || center_crop_ > 1)
    fail("center_crop {} must be in (0, 1] (0: the default)", center_crop_);
  const auto pick = [&](const std::vector<float>& given, const std::vector<float>& stored,
                        const char* what) {
    const std::vector<float>& v = given.empty() ? stored : given;
    if (static_cast<int64_t>(v.size()) == channels) return v;
    if (v.size() == 1) return std::vector<float>(channels, v[0]);
    if (given.empty() && v.size() == 3 && channels == 1)  // a colour set served grey
      return std::vector<float>{0.299f * v[0] + 0.587f * v[1] + 0.114f * v[2]};
    if (given.empty() && v.size() == 1 && channels == 3) return std::vector<float>(3, v[0]);
    fail("image normalisation: {} has {} value(s) for {} channel(s); give one per channel",
         what, v.size(), channels);
  };
  const std::vector<float> mean = pick(config.mean, stored_mean, "mean");
  const std::vector<float> stdev = pick(config.std, stored_std, "std");
  for (int64_t c = 0; c < channels; ++c) {
    if (!(stdev[c] > 0)) fail("image normalisation: std[{}] = {} must be positive", c, stdev[c]);
    scale_.push_back(1.0f / (255.0f * stdev[c]));
    bias_.push_back(-mean[c] / stdev[c]);
  }
}

CropBox ImageTransform::crop_for(int64_t src_width, int64_t src_height, int64_t epoch,
                                 int64_t position) const {
  const double w = static_cast<double>(src_width), h = static_cast<double>(src_height);
  if (!train_) {
    // Resize so the output fits the shorter side, then keep the central share.
    const double fraction =
        center_crop_ > 0 ? center_crop_ : (src_width == width_ && src_height == height_ ? 1.0 : 0.875);
    const double scale = std::min(w / static_cast<double>(width_), h / static_cast<double>(height_));
    const double cw = static_cast<double>(width_) * scale * fraction;
    const double ch = static_cast<double>(height_) * scale * fraction;
    return {(w - cw) / 2, (h - ch) / 2, cw, ch, false};
  }
  Rng rng(augment_seed(seed_, epoch, position));
  CropBox box{0, 0, w, h, false};
  if (augment_ == Augment::crop_flip) {
    bool found = false;
    for (int attempt = 0; attempt < kCropAttempts && !found; ++attempt) {
      const double area = w * h * (kMinScale + (kMaxScale - kMinScale) * rng.uniform());
      const double log_ratio = std::log(kMinRatio) + (std::log(kMaxRatio) - std::log(kMinRatio)) * rng.uniform();
      const double ratio = std::exp(log_ratio);
      const double cw = std::round(std::sqrt(area * ratio)), ch = std::round(std::sqrt(area / ratio));
      if (cw >= 1 && ch >= 1 && cw <= w && ch <= h) {
        const double x = std::floor(rng.uniform() * (w - cw + 1));
        const double y = std::floor(rng.uniform() * (h - ch + 1));
        box = {x, y, cw, ch, false};
        found = true;
      }
    }
    if (!found) {  // a very elongated image: the central crop with the nearest ratio
      const double ratio = std::clamp(w / h, kMinRatio, kMaxRatio);
      const double cw = ratio < w / h ? std::round(h * ratio) : w;
      const double ch = ratio > w / h ? std::round(w / ratio) : h;
      box = {(w - cw) / 2, (h - ch) / 2, cw, ch, false};
    }
  }
  if (augment_ != Augment::none) box.flip = rng.uniform() < 0.5f;
  return box;
}

void ImageTransform::apply(const PixelView& src, const CropBox& box, float* out) const {
  const AxisTaps xs = axis_taps(width_, box.x, box.width, src.width, box.flip);
  const AxisTaps ys = axis_taps(height_, box.y, box.height, src.height, false);
  const int64_t sc = src.channels, row = src.width * sc, plane = height_ * width_;
  const bool nchw = layout_ == ImageLayout::nchw;
  float value[4];
  for (int64_t oy = 0; oy < height_; ++oy) {
    const uint8_t* r0 = src.pixels + ys.lo[oy] * row;
    const uint8_t* r1 = src.pixels + ys.hi[oy] * row;
    const float wy = ys.w_hi[oy];
    for (int64_t ox = 0; ox < width_; ++ox) {
      const int64_t x0 = xs.lo[ox] * sc, x1 = xs.hi[ox] * sc;
      const float wx = xs.w_hi[ox];
      for (int64_t c = 0; c < sc; ++c) {
        const float top = r0[x0 + c] + wx * (float(r0[x1 + c]) - float(r0[x0 + c]));
        const float bottom = r1[x0 + c] + wx * (float(r1[x1 + c]) - float(r1[x0 + c]));
        value[c] = top + wy * (bottom - top);
      }
      // Source channels -> served channels: grey (+alpha) replicated, RGB(A) to luma,
      // alpha dropped.
      float served[3];
      if (channels_ == 3) {
        if (sc >= 3) {
          served[0] = value[0], served[1] = value[1], served[2] = value[2];
        } else {
          served[0] = served[1] = served[2] = value[0];
        }
      } else {
        served[0] = sc >= 3 ? 0.299f * value[0] + 0.587f * value[1] + 0.114f * value[2] : value[0];
      }
      const int64_t pixel = oy * width_ + ox;
      for (int64_t c = 0; c < channels_; ++c) {
        const float v = served[c] * scale_[c] + bias_[c];
        if (nchw)
          out[c * plane + pixel] = v;
        else
          out[pixel * channels_ + c] = v;
      }
    }
  }
}

}  // namespace aiscale::data
