// JPEG and PNG through the project's codec: round trips for every channel count, CMYK
// JPEGs, DCT-scaled decoding, sniffing, and corrupt data (the decoder stays usable).
#include <turbojpeg.h>

#include <cstdlib>

#include <gtest/gtest.h>

#include "aiscale/data/images/codec.h"
#include "image_test_images.h"

namespace aiscale::data {
namespace {

// Mean absolute difference of two pixel arrays.
double mean_difference(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  double sum = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) sum += std::abs(int(a[i]) - int(b[i]));
  return a.empty() ? 0 : sum / static_cast<double>(a.size());
}

TEST(ImageCodec, PngIsLosslessForEveryChannelCount) {
  Decoder decoder;
  for (int64_t c = 1; c <= 4; ++c) {
    const std::vector<uint8_t> px = test_images::gradient(13, 7, c, c);
    const std::vector<uint8_t> png = encode_png(px.data(), 13, 7, c);
    ImageEncoding e;
    ASSERT_TRUE(sniff_encoding(png.data(), png.size(), e));
    EXPECT_EQ(e, ImageEncoding::png);
    std::vector<uint8_t> out;
    ImageHeader h;
    ASSERT_TRUE(decoder.decode(e, png.data(), png.size(), 0, 0, out, h)) << decoder.why();
    EXPECT_EQ(h.width, 13);
    EXPECT_EQ(h.height, 7);
    EXPECT_EQ(h.channels, c);
    EXPECT_EQ(out, px);
  }
}

TEST(ImageCodec, JpegRoundTripsCloselyAndScalesDown) {
  Decoder decoder;
  std::vector<uint8_t> px(64 * 48 * 3);  // a smooth ramp, as photos mostly are
  for (int y = 0; y < 48; ++y)
    for (int x = 0; x < 64; ++x)
      for (int k = 0; k < 3; ++k) px[(y * 64 + x) * 3 + k] = static_cast<uint8_t>(2 * x + 2 * y + 10 * k);
  const std::vector<uint8_t> jpeg = encode_jpeg(px.data(), 64, 48, 3, 95);
  ImageEncoding e;
  ASSERT_TRUE(sniff_encoding(jpeg.data(), jpeg.size(), e));
  EXPECT_EQ(e, ImageEncoding::jpeg);
  std::vector<uint8_t> out;
  ImageHeader h;
  ASSERT_TRUE(decoder.decode(e, jpeg.data(), jpeg.size(), 0, 0, out, h));
  EXPECT_EQ(h.channels, 3);
  EXPECT_EQ(out.size(), px.size());
  EXPECT_LT(mean_difference(out, px), 3.0);
  // At least 30x20 asked: libjpeg's 1/2 scale (32x24) is the smallest that fits.
  ASSERT_TRUE(decoder.decode(e, jpeg.data(), jpeg.size(), 30, 20, out, h));
  EXPECT_EQ(h.width, 32);
  EXPECT_EQ(h.height, 24);
  EXPECT_EQ(out.size(), 32u * 24u * 3u);
}

TEST(ImageCodec, CmykJpegsBecomeRgb) {
  // Inverted CMYK (as Adobe writes it) of a pure colour: stored 255 - ink.
  const int w = 16, h = 16;
  std::vector<uint8_t> cmyk(w * h * 4);
  for (int i = 0; i < w * h; ++i) {
    cmyk[4 * i + 0] = 255;  // no cyan
    cmyk[4 * i + 1] = 55;   // lots of magenta
    cmyk[4 * i + 2] = 255;  // no yellow
    cmyk[4 * i + 3] = 200;  // some black
  }
  tjhandle handle = tjInitCompress();
  unsigned char* jpeg = nullptr;
  unsigned long size = 0;
  ASSERT_EQ(tjCompress2(handle, cmyk.data(), w, 0, h, TJPF_CMYK, &jpeg, &size, TJSAMP_444, 95, 0), 0);
  std::vector<uint8_t> bytes(jpeg, jpeg + size);
  tjFree(jpeg);
  tjDestroy(handle);
  Decoder decoder;
  std::vector<uint8_t> out;
  ImageHeader header;
  ASSERT_TRUE(decoder.decode(ImageEncoding::jpeg, bytes.data(), bytes.size(), 0, 0, out, header)) << decoder.why();
  EXPECT_EQ(header.channels, 3);
  ASSERT_EQ(out.size(), static_cast<size_t>(w * h * 3));
  EXPECT_NEAR(out[0], 200, 6);  // R = 255 * 200 / 255
  EXPECT_NEAR(out[1], 43, 6);   // G = 55 * 200 / 255
  EXPECT_NEAR(out[2], 200, 6);
}

TEST(ImageCodec, CorruptDataFailsWithAReasonAndTheDecoderRecovers) {
  Decoder decoder;
  const std::vector<uint8_t> px = test_images::gradient(16, 16, 3, 2);
  const std::vector<uint8_t> good = encode_jpeg(px.data(), 16, 16, 3);
  std::vector<uint8_t> bad = good;
  for (size_t i = 20; i < bad.size(); ++i) bad[i] = static_cast<uint8_t>(i * 13);
  std::vector<uint8_t> out;
  ImageHeader h;
  EXPECT_FALSE(decoder.decode(ImageEncoding::jpeg, bad.data(), bad.size(), 0, 0, out, h));
  EXPECT_FALSE(decoder.why().empty());
  EXPECT_TRUE(decoder.decode(ImageEncoding::jpeg, good.data(), good.size(), 0, 0, out, h)) << decoder.why();
  const std::vector<uint8_t> png = encode_png(px.data(), 16, 16, 3);
  std::vector<uint8_t> truncated(png.begin(), png.begin() + static_cast<long>(png.size() / 2));
  EXPECT_FALSE(decoder.decode(ImageEncoding::png, truncated.data(), truncated.size(), 0, 0, out, h));
  const uint8_t text[] = "GIF89a....";
  ImageEncoding e;
  EXPECT_FALSE(sniff_encoding(text, sizeof text, e));
}

}  // namespace
}  // namespace aiscale::data
