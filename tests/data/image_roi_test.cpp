// Region-of-interest JPEG decoding (Decoder::decode_region): the region's pixels, and the
// served crop made from them, match decoding the whole image and cropping, at full and
// DCT-reduced scales, for colour, grey and CMYK JPEGs; corrupt data fails cleanly; and a
// JPEG store serves (nearly) the same batches with region decoding on and off.
#include <turbojpeg.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include <gtest/gtest.h>

#include "aiscale/data/images/codec.h"
#include "aiscale/data/images/image_source.h"
#include "aiscale/data/images/pack_images.h"
#include "aiscale/data/images/transform.h"
#include "../support/run_support.h"
#include "image_test_images.h"

namespace aiscale::data {
namespace {

namespace fs = std::filesystem;

// A smooth photo-like image: a few slow waves per channel.
std::vector<uint8_t> smooth_image(int64_t w, int64_t h, int64_t c) {
  std::vector<uint8_t> px(static_cast<size_t>(w * h * c));
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x)
      for (int64_t k = 0; k < c; ++k) {
        const double v = 128 + 60 * std::sin(0.031 * x + 1.3 * k) * std::cos(0.023 * y - 0.7 * k) +
                         30 * std::sin(0.011 * (x + 2 * y) + k);
        px[(y * w + x) * c + k] = static_cast<uint8_t>(std::clamp(v, 0.0, 255.0));
      }
  return px;
}

struct Difference {
  double mean = 0;
  int max = 0;
};

// The region's pixels against the same rectangle of the whole decoded image.
Difference compare_region(const std::vector<uint8_t>& whole, int64_t whole_width,
                          const std::vector<uint8_t>& region_pixels, const PixelRect& r, int64_t c) {
  Difference d;
  double sum = 0;
  for (int64_t y = 0; y < r.height; ++y)
    for (int64_t i = 0; i < r.width * c; ++i) {
      const int a = whole[((r.y + y) * whole_width + r.x) * c + i];
      const int b = region_pixels[(y * r.width) * c + i];
      sum += std::abs(a - b);
      d.max = std::max(d.max, std::abs(a - b));
    }
  d.mean = sum / static_cast<double>(r.width * r.height * c);
  return d;
}

struct Case {
  int64_t min_width, min_height;  // 0: full scale
  double x, y, width, height;     // the crop, in full-size pixels
};

void expect_region_matches(Decoder& decoder, const std::vector<uint8_t>& jpeg, int64_t full_width,
                           int64_t full_height, int64_t channels, const Case& k) {
  SCOPED_TRACE(testing::Message() << "crop " << k.width << "x" << k.height << " at (" << k.x << ", "
                                  << k.y << "), minimum " << k.min_width << "x" << k.min_height);
  std::vector<uint8_t> whole, part;
  ImageHeader w, got;
  PixelRect r;
  ASSERT_TRUE(decoder.decode(ImageEncoding::jpeg, jpeg.data(), jpeg.size(), k.min_width, k.min_height, whole, w))
      << decoder.why();
  ASSERT_TRUE(decoder.decode_region(jpeg.data(), jpeg.size(), k.min_width, k.min_height, k.x, k.y,
                                    k.width, k.height, part, got, r))
      << decoder.why();
  EXPECT_EQ(got.width, w.width);
  EXPECT_EQ(got.height, w.height);
  EXPECT_EQ(got.channels, channels);
  ASSERT_EQ(part.size(), static_cast<size_t>(r.width * r.height * channels));
  // The region covers the scaled crop and lies within the image.
  const double sx = static_cast<double>(w.width) / full_width, sy = static_cast<double>(w.height) / full_height;
  EXPECT_GE(r.x, 0);
  EXPECT_GE(r.y, 0);
  EXPECT_LE(r.x + r.width, w.width);
  EXPECT_LE(r.y + r.height, w.height);
  EXPECT_LE(static_cast<double>(r.x), std::floor(k.x * sx));
  EXPECT_LE(static_cast<double>(r.y), std::floor(k.y * sy));
  EXPECT_GE(static_cast<double>(r.x + r.width), std::min<double>(w.width, std::ceil((k.x + k.width) * sx)));
  EXPECT_GE(static_cast<double>(r.y + r.height), std::min<double>(w.height, std::ceil((k.y + k.height) * sy)));
  // A small crop of a larger image decodes well under half of it.
  if (full_width >= 100 && k.width * k.height < 0.25 * static_cast<double>(full_width * full_height)) {
    EXPECT_LT(r.width * r.height, w.width * w.height / 2);
  }
  const Difference d = compare_region(whole, w.width, part, r, channels);
  if (std::getenv("AISCALE_ROI_TEST_VERBOSE"))
    std::printf("region %lldx%lld at (%lld,%lld) of %lldx%lld: mean %.4f max %d\n", (long long)r.width,
                (long long)r.height, (long long)r.x, (long long)r.y, (long long)w.width,
                (long long)w.height, d.mean, d.max);
  EXPECT_LT(d.mean, 1.0);
  EXPECT_LE(d.max, 8);

  // The served crop, resampled from either, is the same box of the image.
  ImageSourceConfig config;
  config.mean = {0};
  config.std = {1};
  const ImageTransform t(config, channels, 32, 32, {}, {});
  const CropBox box_whole{k.x * sx, k.y * sy, k.width * sx, k.height * sy, true};
  const CropBox box_region{box_whole.x - static_cast<double>(r.x), box_whole.y - static_cast<double>(r.y),
                           box_whole.width, box_whole.height, true};
  std::vector<float> a(static_cast<size_t>(t.floats_per_image())), b(a.size());
  t.apply({whole.data(), w.width, w.height, channels}, box_whole, a.data());
  t.apply({part.data(), r.width, r.height, channels}, box_region, b.data());
  double sum = 0, worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    sum += std::abs(a[i] - b[i]) * 255;
    worst = std::max(worst, std::abs(a[i] - b[i]) * 255.0);
  }
  EXPECT_LT(sum / static_cast<double>(a.size()), 1.0);
  EXPECT_LE(worst, 8.0);
}

TEST(ImageRoi, JpegRegionMatchesTheWholeImageCroppedAtEveryScale) {
  Decoder decoder;
  const int64_t W = 333, H = 250;  // not multiples of the 16-pixel iMCU
  const std::vector<Case> cases = {
      {0, 0, 37.5, 20.25, 150, 100},     // inside, full scale
      {0, 0, 0, 0, 333, 250},            // the whole image
      {0, 0, 300, 200, 33, 50},          // the bottom-right corner
      {0, 0, 17, 0, 1, 250},             // one column
      {100, 80, 123.4, 61.2, 180, 150},  // 3/8 scale
      {168, 126, 10, 5, 200, 180},       // 5/8 scale
      {40, 30, 250, 190, 83, 60},        // 1/8 scale, at the corner
  };
  for (const int64_t channels : {3, 1}) {
    SCOPED_TRACE(testing::Message() << channels << " channel(s)");
    const std::vector<uint8_t> px = smooth_image(W, H, channels);
    const std::vector<uint8_t> jpeg = encode_jpeg(px.data(), W, H, channels, 90);
    for (const Case& k : cases) expect_region_matches(decoder, jpeg, W, H, channels, k);
  }
}

TEST(ImageRoi, CmykJpegRegionBecomesRgbLikeTheWholeImage) {
  const int w = 48, h = 40;
  std::vector<uint8_t> cmyk(w * h * 4);
  for (int i = 0; i < w * h; ++i)
    for (int k = 0; k < 4; ++k) cmyk[4 * i + k] = static_cast<uint8_t>(120 + 50 * std::sin(0.1 * (i % w) + 0.07 * (i / w) + k));
  tjhandle handle = tjInitCompress();
  unsigned char* data = nullptr;
  unsigned long size = 0;
  ASSERT_EQ(tjCompress2(handle, cmyk.data(), w, 0, h, TJPF_CMYK, &data, &size, TJSAMP_420, 95, 0), 0);
  const std::vector<uint8_t> jpeg(data, data + size);
  tjFree(data);
  tjDestroy(handle);
  Decoder decoder;
  expect_region_matches(decoder, jpeg, w, h, 3, {0, 0, 13, 9, 20, 25});
}

TEST(ImageRoi, CorruptJpegFailsWithAReasonAndTheDecoderRecovers) {
  Decoder decoder;
  const std::vector<uint8_t> px = smooth_image(64, 64, 3);
  const std::vector<uint8_t> good = encode_jpeg(px.data(), 64, 64, 3);
  std::vector<uint8_t> out;
  ImageHeader h;
  PixelRect r;
  // Garbage after the header: a fatal libjpeg error.
  std::vector<uint8_t> bad = good;
  for (size_t i = 20; i < bad.size(); ++i) bad[i] = static_cast<uint8_t>(i * 13);
  EXPECT_FALSE(decoder.decode_region(bad.data(), bad.size(), 0, 0, 10, 10, 30, 30, out, h, r));
  EXPECT_FALSE(decoder.why().empty());
  // Not a JPEG at all.
  const std::vector<uint8_t> png = encode_png(px.data(), 64, 64, 3);
  EXPECT_FALSE(decoder.decode_region(png.data(), png.size(), 0, 0, 10, 10, 30, 30, out, h, r));
  // Scan data corrupted after the tables: libjpeg stops with an error or decodes past
  // it (a warning), never crashes; the same decoder then decodes a good image.
  std::vector<uint8_t> scrambled = good;
  for (size_t i = scrambled.size() / 2; i + 2 < scrambled.size(); i += 7) scrambled[i] ^= 0x5A;
  std::vector<uint8_t> truncated(good.begin(), good.begin() + static_cast<long>(good.size() * 2 / 3));
  for (const auto* damaged : {&scrambled, &truncated}) {
    if (decoder.decode_region(damaged->data(), damaged->size(), 0, 0, 0, 0, 64, 64, out, h, r)) {
      EXPECT_EQ(out.size(), static_cast<size_t>(r.width * r.height * 3));
    } else {
      EXPECT_FALSE(decoder.why().empty());
    }
  }
  ASSERT_TRUE(decoder.decode_region(good.data(), good.size(), 0, 0, 10, 10, 30, 30, out, h, r)) << decoder.why();
  EXPECT_EQ(out.size(), static_cast<size_t>(r.width * r.height * 3));
}

TEST(ImageRoi, JpegStoreServesTheSameBatchesWithRegionDecodingOnAndOff) {
  const fs::path dir = testsupport::temp_dir("store-roi");
  fs::create_directories(dir / "images" / "a");
  fs::create_directories(dir / "images" / "b");
  for (int i = 0; i < 6; ++i) {
    const std::vector<uint8_t> px = smooth_image(120 + 10 * i, 90 + 7 * i, 3);
    const std::vector<uint8_t> jpeg = encode_jpeg(px.data(), 120 + 10 * i, 90 + 7 * i, 3);
    test_images::write_file(dir / "images" / (i % 2 ? "a" : "b") / ("img" + std::to_string(i) + ".jpg"),
                            std::string(jpeg.begin(), jpeg.end()));
  }
  PackImagesOptions o;
  o.folder = (dir / "images").string();
  o.output = (dir / "store").string();
  pack_images(o);
  for (const bool train : {true, false}) {
    SCOPED_TRACE(train ? "train" : "validation");
    ImageSourceConfig c;
    c.path = o.output;
    c.batch_size = 3;
    c.seed = 5;
    c.train = train;
    c.height = c.width = 40;  // reduced DCT scales for the larger crops
    c.threads = 2;
    c.mean = {0};
    c.std = {1};
    auto on = open_image_source(c);
    c.roi_decode = false;
    auto off = open_image_source(c);
    ImageBatch a, b;
    for (int k = 0; k < 4; ++k) {
      on->next_batch(a);
      off->next_batch(b);
      ASSERT_EQ(a.labels, b.labels);
      ASSERT_EQ(a.pixels.size(), b.pixels.size());
      double sum = 0, worst = 0;
      for (size_t i = 0; i < a.pixels.size(); ++i) {
        const double d = std::abs(a.pixels[i] - b.pixels[i]) * 255.0;
        sum += d;
        worst = std::max(worst, d);
      }
      EXPECT_LT(sum / static_cast<double>(a.pixels.size()), 0.5) << "batch " << k;
      EXPECT_LE(worst, 8.0) << "batch " << k;
    }
    EXPECT_EQ(on->stats().skipped_corrupt, 0);
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace aiscale::data
