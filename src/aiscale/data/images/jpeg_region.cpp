// Region decoding through libjpeg; see jpeg_region.h.
#include "aiscale/data/images/jpeg_region.h"

// jpeglib.h needs FILE and size_t declared first.
#include <csetjmp>
#include <cstdio>

#include <jpeglib.h>

#include "aiscale/core/error.h"

namespace aiscale::data {
namespace {

// libjpeg reports fatal errors through error_exit, which must not return: jump back to the
// decode call (only libjpeg's C frames lie between) and fail that one image.
struct ErrorManager {
  jpeg_error_mgr pub;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void on_fatal(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<ErrorManager*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

// Warnings (corrupt data that libjpeg decodes past) would go to stderr by default; the
// image still decodes, as with TurboJPEG, so stay quiet.
void on_message(j_common_ptr) {}

}  // namespace

struct JpegRegionDecoder::State {
  jpeg_decompress_struct cinfo{};
  ErrorManager err{};
};

JpegRegionDecoder::JpegRegionDecoder() : state_(std::make_unique<State>()) {
  jpeg_decompress_struct* cinfo = &state_->cinfo;
  cinfo->err = jpeg_std_error(&state_->err.pub);
  state_->err.pub.error_exit = on_fatal;
  state_->err.pub.output_message = on_message;
  if (setjmp(state_->err.jump)) fail("cannot start the JPEG region decoder: {}", state_->err.message);
  jpeg_create_decompress(cinfo);
}

JpegRegionDecoder::~JpegRegionDecoder() { jpeg_destroy_decompress(&state_->cinfo); }

bool JpegRegionDecoder::decode(const uint8_t* bytes, size_t size, int scale_num, PixelRect& region,
                               int64_t& channels, std::vector<uint8_t>& pixels, std::string& why) {
  jpeg_decompress_struct* cinfo = &state_->cinfo;
  // Nothing below setjmp that is read after the jump changes in between: the jump
  // returns here with cinfo (unchanged) and the caller's references.
  if (setjmp(state_->err.jump)) {
    why = state_->err.message;
    jpeg_abort_decompress(cinfo);
    return false;
  }
  jpeg_abort_decompress(cinfo);  // a previous image that stopped early (e.g. bad_alloc)
  jpeg_mem_src(cinfo, bytes, static_cast<unsigned long>(size));
  jpeg_read_header(cinfo, TRUE);
  switch (cinfo->jpeg_color_space) {
    case JCS_GRAYSCALE: cinfo->out_color_space = JCS_GRAYSCALE; break;
    case JCS_CMYK:
    case JCS_YCCK: cinfo->out_color_space = JCS_CMYK; break;
    default: cinfo->out_color_space = JCS_RGB; break;
  }
  // TurboJPEG's defaults, so both paths give the same pixels: accurate integer DCT,
  // fancy (smooth) chroma upsampling.
  cinfo->dct_method = JDCT_ISLOW;
  cinfo->do_fancy_upsampling = TRUE;
  cinfo->scale_num = static_cast<unsigned>(scale_num);
  cinfo->scale_denom = 8;
  jpeg_start_decompress(cinfo);
  const int64_t width = cinfo->output_width, height = cinfo->output_height;
  if (region.x < 0 || region.y < 0 || region.width < 1 || region.height < 1 ||
      region.x + region.width > width || region.y + region.height > height) {
    why = fmt::format("region {}x{} at ({}, {}) lies outside the {}x{} image", region.width,
                      region.height, region.x, region.y, width, height);
    jpeg_abort_decompress(cinfo);
    return false;
  }
  if (region.width < width) {
    JDIMENSION x = static_cast<JDIMENSION>(region.x), w = static_cast<JDIMENSION>(region.width);
    jpeg_crop_scanline(cinfo, &x, &w);
    region.x = x, region.width = w;
  }
  if (region.y > 0) jpeg_skip_scanlines(cinfo, static_cast<JDIMENSION>(region.y));
  channels = cinfo->output_components;
  const size_t stride = static_cast<size_t>(region.width * channels);
  pixels.resize(stride * static_cast<size_t>(region.height));
  const JDIMENSION end = static_cast<JDIMENSION>(region.y + region.height);
  while (cinfo->output_scanline < end) {
    JSAMPROW row = pixels.data() + (cinfo->output_scanline - region.y) * stride;
    if (jpeg_read_scanlines(cinfo, &row, 1) != 1) {  // only with a suspending source
      why = "the JPEG data ended before the region";
      jpeg_abort_decompress(cinfo);
      return false;
    }
  }
  // The rows below the region are never decoded.
  jpeg_abort_decompress(cinfo);
  return true;
}

}  // namespace aiscale::data
