// Image encodings inside a store: JPEG (libjpeg-turbo's TurboJPEG API; its libjpeg API
// for region decoding), PNG (libpng's simplified API) and raw pixels. One Decoder per
// thread (it owns a TurboJPEG handle and a libjpeg decompressor and reuses its buffers).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "aiscale/core/non_copyable.h"
#include "aiscale/data/images/jpeg_region.h"

namespace aiscale::data {

enum class ImageEncoding : uint8_t { raw = 0, jpeg = 1, png = 2 };
const char* to_string(ImageEncoding encoding);
// From the first bytes (JPEG's FF D8 FF, PNG's signature); false for anything else.
bool sniff_encoding(const uint8_t* bytes, size_t size, ImageEncoding& encoding);

// The size and channels an encoded image declares, without decoding it.
struct ImageHeader {
  int64_t width = 0, height = 0, channels = 0;  // channels 1, 2 (grey+alpha), 3 or 4
};

class Decoder : NonCopyable {
 public:
  Decoder();
  ~Decoder();

  // false (with why()) when the bytes are not a readable image of that encoding.
  bool header(ImageEncoding encoding, const uint8_t* bytes, size_t size, ImageHeader& out);
  // Decodes into `pixels` (rows of width * channels bytes; grey stays grey, alpha is kept,
  // CMYK JPEGs become RGB).
  // JPEG may be decoded at a reduced scale (libjpeg's DCT scaling, 1/8 steps) so that
  // neither side falls below min_width x min_height; 0 asks for full size. The decoded
  // size is in `out`. false (with why()) for corrupt data.
  bool decode(ImageEncoding encoding, const uint8_t* bytes, size_t size, int64_t min_width,
              int64_t min_height, std::vector<uint8_t>& pixels, ImageHeader& out);
  // JPEG only: decodes just the part of the image that the box (x, y, width, height, in
  // full-size source pixels) and bilinear sampling at its edges need, at the scale decode()
  // would choose for the same minimum (DCT scaling first, then the region in scaled
  // pixels). `out` is the whole image's size at that scale; `region` the rectangle of it
  // that `pixels` holds (rows of region.width * channels bytes). Its columns start at an
  // iMCU boundary (jpeg_crop_scanline), so callers shift their box by region.x, region.y.
  // The pixels equal decode()'s over the same rectangle, up to libjpeg's chroma
  // upsampling at the region's own edges. false (with why()) for corrupt data.
  bool decode_region(const uint8_t* bytes, size_t size, int64_t min_width, int64_t min_height,
                     double x, double y, double width, double height,
                     std::vector<uint8_t>& pixels, ImageHeader& out, PixelRect& region);
  const std::string& why() const { return why_; }

 private:
  // After a fatal error TurboJPEG's handle can refuse the next image; start a fresh one.
  void reset_jpeg();
  // The smallest DCT scale k/8 that keeps both sides of the image (header `full`) at
  // least the minimum (0: full size); its numerator k.
  int jpeg_scale(const ImageHeader& full, int64_t min_width, int64_t min_height) const;

  void* jpeg_ = nullptr;  // tjhandle
  std::unique_ptr<JpegRegionDecoder> region_;
  bool cmyk_ = false;     // the last JPEG header read was CMYK or YCCK
  std::string why_;
};

// Encoders for pack-images and the tests: `pixels` is rows of width * channels bytes,
// channels 1 or 3 (JPEG) or 1-4 (PNG). Throw aiscale::Error on failure.
std::vector<uint8_t> encode_jpeg(const uint8_t* pixels, int64_t width, int64_t height,
                                 int64_t channels, int quality = 90);
std::vector<uint8_t> encode_png(const uint8_t* pixels, int64_t width, int64_t height,
                                int64_t channels);

}  // namespace aiscale::data
