// Region-of-interest JPEG decoding through libjpeg's own API (libjpeg-turbo): only the
// rows of a region (jpeg_skip_scanlines passes over the ones above it, reading stops
// below it) and only its columns (jpeg_crop_scanline, widened to iMCU boundaries) are
// decoded. TurboJPEG's tjDecompress2 has no region; the loader's random-resized-crop keeps
// about half of a photo's area on average, so the rest need not be decoded.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "aiscale/core/non_copyable.h"

namespace aiscale::data {

// A rectangle of whole pixels.
struct PixelRect {
  int64_t x = 0, y = 0, width = 0, height = 0;
};

class JpegRegionDecoder : NonCopyable {
 public:
  JpegRegionDecoder();
  ~JpegRegionDecoder();

  // Decodes `region` (in pixels of the image scaled by scale_num/8, within it) at that
  // DCT scale into `pixels` (rows of region.width * channels bytes): grey as 1 channel,
  // CMYK/YCCK as 4 (inverted as stored), anything else as RGB. On return `region` holds
  // the columns actually decoded (jpeg_crop_scanline moves the left edge down and the width
  // up to iMCU boundaries; the rows are exactly those asked) and channels the count.
  // false with `why` for corrupt data (libjpeg's message); warnings (e.g. a truncated
  // last scan, extra bytes) decode as far as they go, as TurboJPEG does.
  bool decode(const uint8_t* bytes, size_t size, int scale_num, PixelRect& region,
              int64_t& channels, std::vector<uint8_t>& pixels, std::string& why);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace aiscale::data
