// JPEG, PNG and raw pixels; see codec.h.
#include "aiscale/data/images/codec.h"

#include <png.h>
#include <turbojpeg.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "aiscale/core/enum_names.h"
#include "aiscale/core/error.h"

namespace aiscale::data {
namespace {

bool png_header(const uint8_t* bytes, size_t size, png_image& image, std::string& why) {
  std::memset(&image, 0, sizeof image);
  image.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&image, bytes, size)) {
    why = image.message;
    png_image_free(&image);
    return false;
  }
  return true;
}

int64_t png_channels(const png_image& image) {
  const bool colour = (image.format & PNG_FORMAT_FLAG_COLOR) != 0;
  const bool alpha = (image.format & PNG_FORMAT_FLAG_ALPHA) != 0;
  return (colour ? 3 : 1) + (alpha ? 1 : 0);
}

uint32_t png_format_for(int64_t channels) {
  switch (channels) {
    case 1: return PNG_FORMAT_GRAY;
    case 2: return PNG_FORMAT_GA;
    case 3: return PNG_FORMAT_RGB;
    default: return PNG_FORMAT_RGBA;
  }
}

// Adobe writes inverted CMYK: each stored value is 255 - ink, so R = C' * K' / 255.
// Converts n pixels in place, 4 bytes each to 3.
void cmyk_to_rgb(std::vector<uint8_t>& pixels, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t* q = pixels.data() + 4 * i;
    const unsigned k = q[3];
    const uint8_t r = static_cast<uint8_t>(q[0] * k / 255), g = static_cast<uint8_t>(q[1] * k / 255),
                  b = static_cast<uint8_t>(q[2] * k / 255);
    pixels[3 * i] = r, pixels[3 * i + 1] = g, pixels[3 * i + 2] = b;
  }
  pixels.resize(static_cast<size_t>(n * 3));
}

}  // namespace

const char* to_string(ImageEncoding encoding) {
  static constexpr EnumName<ImageEncoding> encodings[] = {
      {ImageEncoding::raw, "raw"}, {ImageEncoding::jpeg, "jpeg"}, {ImageEncoding::png, "png"}};
  return enum_name(encodings, encoding, "unknown");
}

bool sniff_encoding(const uint8_t* bytes, size_t size, ImageEncoding& encoding) {
  static const uint8_t png_signature[8] = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A};
  if (size >= 3 && bytes[0] == 0xFF && bytes[1] == 0xD8 && bytes[2] == 0xFF) {
    encoding = ImageEncoding::jpeg;
    return true;
  }
  if (size >= 8 && std::memcmp(bytes, png_signature, 8) == 0) {
    encoding = ImageEncoding::png;
    return true;
  }
  return false;
}

Decoder::Decoder() : jpeg_(tjInitDecompress()), region_(std::make_unique<JpegRegionDecoder>()) {
  if (jpeg_ == nullptr) fail("cannot start the JPEG decoder: {}", tjGetErrorStr2(nullptr));
}

Decoder::~Decoder() { tjDestroy(static_cast<tjhandle>(jpeg_)); }

void Decoder::reset_jpeg() {
  tjDestroy(static_cast<tjhandle>(jpeg_));
  jpeg_ = tjInitDecompress();
  if (jpeg_ == nullptr) fail("cannot restart the JPEG decoder: {}", tjGetErrorStr2(nullptr));
}

bool Decoder::header(ImageEncoding encoding, const uint8_t* bytes, size_t size, ImageHeader& out) {
  if (encoding == ImageEncoding::jpeg) {
    int width = 0, height = 0, subsampling = 0, colorspace = 0;
    if (tjDecompressHeader3(static_cast<tjhandle>(jpeg_), bytes, static_cast<unsigned long>(size),
                            &width, &height, &subsampling, &colorspace) != 0) {
      why_ = tjGetErrorStr2(static_cast<tjhandle>(jpeg_));
      reset_jpeg();
      return false;
    }
    cmyk_ = colorspace == TJCS_CMYK || colorspace == TJCS_YCCK;
    out = {width, height, colorspace == TJCS_GRAY ? 1 : 3};
    return true;
  }
  if (encoding == ImageEncoding::png) {
    png_image image;
    if (!png_header(bytes, size, image, why_)) return false;
    out = {image.width, image.height, png_channels(image)};
    png_image_free(&image);
    return true;
  }
  why_ = "raw pixels carry no header";
  return false;
}

bool Decoder::decode(ImageEncoding encoding, const uint8_t* bytes, size_t size, int64_t min_width,
                     int64_t min_height, std::vector<uint8_t>& pixels, ImageHeader& out) {
  if (!header(encoding, bytes, size, out)) return false;
  if (out.width <= 0 || out.height <= 0 || out.width > 65535 || out.height > 65535) {
    why_ = "implausible image size";
    return false;
  }
  if (encoding == ImageEncoding::jpeg) {
    auto* handle = static_cast<tjhandle>(jpeg_);
    // The smallest DCT scale (k/8) that keeps both sides at least the minimum: decoding
    // a 500x375 photo for a 224 crop at 1/2 scale is about 3x faster.
    const tjscalingfactor f{jpeg_scale(out, min_width, min_height), 8};
    const int64_t width = TJSCALED(static_cast<int>(out.width), f);
    const int64_t height = TJSCALED(static_cast<int>(out.height), f);
    // CMYK JPEGs (a few in ImageNet, from Adobe software) decode as 4 channels, then
    // become RGB below.
    pixels.resize(static_cast<size_t>(width * height * (cmyk_ ? 4 : out.channels)));
    const int format = cmyk_ ? TJPF_CMYK : out.channels == 1 ? TJPF_GRAY : TJPF_RGB;
    if (tjDecompress2(handle, bytes, static_cast<unsigned long>(size), pixels.data(),
                      static_cast<int>(width), 0, static_cast<int>(height), format, 0) != 0 &&
        tjGetErrorCode(handle) != TJERR_WARNING) {  // warnings (extra bytes) decode fine
      why_ = tjGetErrorStr2(handle);
      reset_jpeg();
      return false;
    }
    if (cmyk_) cmyk_to_rgb(pixels, width * height);
    out.width = width, out.height = height;
    return true;
  }
  png_image image;
  if (!png_header(bytes, size, image, why_)) return false;
  image.format = png_format_for(out.channels);
  pixels.resize(PNG_IMAGE_SIZE(image));
  if (!png_image_finish_read(&image, nullptr, pixels.data(), 0, nullptr)) {
    why_ = image.message;
    png_image_free(&image);
    return false;
  }
  return true;
}

int Decoder::jpeg_scale(const ImageHeader& full, int64_t min_width, int64_t min_height) const {
  int best = 8;
  if (min_width <= 0 || min_height <= 0) return best;
  for (int k = 7; k >= 1; --k) {
    const tjscalingfactor f{k, 8};
    if (TJSCALED(static_cast<int>(full.width), f) >= min_width &&
        TJSCALED(static_cast<int>(full.height), f) >= min_height)
      best = k;
  }
  return best;
}

bool Decoder::decode_region(const uint8_t* bytes, size_t size, int64_t min_width, int64_t min_height,
                            double x, double y, double width, double height,
                            std::vector<uint8_t>& pixels, ImageHeader& out, PixelRect& region) {
  if (!header(ImageEncoding::jpeg, bytes, size, out)) return false;
  if (out.width <= 0 || out.height <= 0 || out.width > 65535 || out.height > 65535) {
    why_ = "implausible image size";
    return false;
  }
  if (!(width > 0 && height > 0)) {
    why_ = fmt::format("empty region {}x{} asked", width, height);
    return false;
  }
  const int k = jpeg_scale(out, min_width, min_height);
  const tjscalingfactor f{k, 8};
  const int64_t sw = TJSCALED(static_cast<int>(out.width), f);
  const int64_t sh = TJSCALED(static_cast<int>(out.height), f);
  const double sx = static_cast<double>(sw) / static_cast<double>(out.width);
  const double sy = static_cast<double>(sh) / static_cast<double>(out.height);
  // Bilinear sampling of the box reads from half a pixel before it to one after it; one
  // more pixel on each side keeps libjpeg's upsampling at the region's edges away from
  // the pixels that are read.
  constexpr double kMargin = 2;
  const auto span = [](double start, double length, double scale, int64_t size, int64_t& lo,
                       int64_t& len) {
    lo = std::clamp<int64_t>(static_cast<int64_t>(std::floor(start * scale - kMargin)), 0, size - 1);
    const int64_t hi = std::clamp<int64_t>(
        static_cast<int64_t>(std::ceil((start + length) * scale + kMargin)), lo + 1, size);
    len = hi - lo;
  };
  span(x, width, sx, sw, region.x, region.width);
  span(y, height, sy, sh, region.y, region.height);
  int64_t channels = 0;
  if (!region_->decode(bytes, size, k, region, channels, pixels, why_)) return false;
  if (channels == 4) cmyk_to_rgb(pixels, region.width * region.height);
  out.width = sw, out.height = sh;
  return true;
}

std::vector<uint8_t> encode_jpeg(const uint8_t* pixels, int64_t width, int64_t height,
                                 int64_t channels, int quality) {
  if (channels != 1 && channels != 3) fail("JPEG encoding needs 1 or 3 channels, not {}", channels);
  tjhandle handle = tjInitCompress();
  if (handle == nullptr) fail("cannot start the JPEG encoder: {}", tjGetErrorStr2(nullptr));
  unsigned char* jpeg = nullptr;
  unsigned long jpeg_size = 0;
  const int status = tjCompress2(handle, pixels, static_cast<int>(width), 0, static_cast<int>(height),
                                 channels == 1 ? TJPF_GRAY : TJPF_RGB, &jpeg, &jpeg_size,
                                 channels == 1 ? TJSAMP_GRAY : TJSAMP_420, quality, 0);
  if (status != 0) {
    const std::string why = tjGetErrorStr2(handle);
    tjDestroy(handle);
    fail("JPEG encoding of a {}x{} image failed: {}", width, height, why);
  }
  std::vector<uint8_t> out(jpeg, jpeg + jpeg_size);
  tjFree(jpeg);
  tjDestroy(handle);
  return out;
}

std::vector<uint8_t> encode_png(const uint8_t* pixels, int64_t width, int64_t height,
                                int64_t channels) {
  if (channels < 1 || channels > 4) fail("PNG encoding needs 1-4 channels, not {}", channels);
  png_image image;
  std::memset(&image, 0, sizeof image);
  image.version = PNG_IMAGE_VERSION;
  image.width = static_cast<png_uint_32>(width);
  image.height = static_cast<png_uint_32>(height);
  image.format = png_format_for(channels);
  png_alloc_size_t size = 0;
  if (!png_image_write_to_memory(&image, nullptr, &size, 0, pixels, 0, nullptr))
    fail("PNG encoding of a {}x{} image failed: {}", width, height, image.message);
  std::vector<uint8_t> out(size);
  if (!png_image_write_to_memory(&image, out.data(), &size, 0, pixels, 0, nullptr))
    fail("PNG encoding of a {}x{} image failed: {}", width, height, image.message);
  out.resize(size);
  return out;
}

}  // namespace aiscale::data
