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

namespace {

// The resampling loop with the source and served channel counts known at compile time
// (SC 1-4 in, OC 1 or 3 out), so the per-pixel channel handling unrolls without branches.
template <int SC, int OC>
void resample(const PixelView& src, const AxisTaps& xs, const AxisTaps& ys, int64_t height,
              int64_t width, bool nchw, const float* scale, const float* bias, float* out) {
  const int64_t row = src.width * SC, plane = height * width;
  // Separable: blend the two source rows over the columns the taps touch (a contiguous,
  // vectorisable pass), then interpolate along the row.
  const int64_t col_lo = *std::min_element(xs.lo.begin(), xs.lo.end());
  const int64_t col_hi = *std::max_element(xs.hi.begin(), xs.hi.end());
  const int64_t span = (col_hi - col_lo + 1) * SC;
  thread_local std::vector<float> blended;
  blended.resize(static_cast<size_t>(span));
  float* line = blended.data() - col_lo * SC;  // indexed by source column * SC
  for (int64_t oy = 0; oy < height; ++oy) {
    const uint8_t* r0 = src.pixels + ys.lo[oy] * row + col_lo * SC;
    const uint8_t* r1 = src.pixels + ys.hi[oy] * row + col_lo * SC;
    const float wy = ys.w_hi[oy];
    float* b = blended.data();
    for (int64_t i = 0; i < span; ++i) {
      const float top = r0[i];
      b[i] = top + wy * (float(r1[i]) - top);
    }
    for (int64_t ox = 0; ox < width; ++ox) {
      const float* p0 = line + xs.lo[ox] * SC;
      const float* p1 = line + xs.hi[ox] * SC;
      const float wx = xs.w_hi[ox];
      float value[SC];
      for (int c = 0; c < SC; ++c) value[c] = p0[c] + wx * (p1[c] - p0[c]);
      // Source channels -> served channels: grey (+alpha) replicated, RGB(A) to luma,
      // alpha dropped.
      float served[OC];
      if constexpr (OC == 3) {
        for (int c = 0; c < 3; ++c) served[c] = SC >= 3 ? value[c] : value[0];
      } else if constexpr (SC >= 3) {
        served[0] = 0.299f * value[0] + 0.587f * value[1] + 0.114f * value[2];
      } else {
        served[0] = value[0];
      }
      const int64_t pixel = oy * width + ox;
      if (nchw) {
        for (int c = 0; c < OC; ++c) out[c * plane + pixel] = served[c] * scale[c] + bias[c];
      } else {
        for (int c = 0; c < OC; ++c) out[pixel * OC + c] = served[c] * scale[c] + bias[c];
      }
    }
  }
}

template <int OC>
void resample_from(const PixelView& src, const AxisTaps& xs, const AxisTaps& ys, int64_t height,
                   int64_t width, bool nchw, const float* scale, const float* bias, float* out) {
  switch (src.channels) {
    case 1: return resample<1, OC>(src, xs, ys, height, width, nchw, scale, bias, out);
    case 2: return resample<2, OC>(src, xs, ys, height, width, nchw, scale, bias, out);
    case 3: return resample<3, OC>(src, xs, ys, height, width, nchw, scale, bias, out);
    case 4: return resample<4, OC>(src, xs, ys, height, width, nchw, scale, bias, out);
    default: fail("images with {} channels cannot be served (1-4 are supported)", src.channels);
  }
}

}  // namespace

void ImageTransform::apply(const PixelView& src, const CropBox& box, float* out) const {
  const AxisTaps xs = axis_taps(width_, box.x, box.width, src.width, box.flip);
  const AxisTaps ys = axis_taps(height_, box.y, box.height, src.height, false);
  const bool nchw = layout_ == ImageLayout::nchw;
  if (channels_ == 3)
    resample_from<3>(src, xs, ys, height_, width_, nchw, scale_.data(), bias_.data(), out);
  else
    resample_from<1>(src, xs, ys, height_, width_, nchw, scale_.data(), bias_.data(), out);
}

}  // namespace aiscale::data
