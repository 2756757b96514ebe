// IDX files (the MNIST family's format: a big-endian header, then unsigned bytes), read
// through zlib so that the gzip-compressed files of Debian's dataset-fashion-mnist and
// uncompressed copies both work.
#include <zlib.h>

#include <algorithm>
#include <cstring>

#include "aiscale/core/error.h"
#include "aiscale/core/validate.h"
#include "aiscale/tune/dataset.h"

namespace aiscale::tune {
namespace {

std::vector<unsigned char> read_maybe_gzip(const std::string& path, std::string_view what) {
  validate::regular_file(path, what);
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) fail("{} '{}' cannot be opened", what, path);
  std::vector<unsigned char> out;
  unsigned char buf[1 << 16];
  for (;;) {
    const int n = gzread(f, buf, sizeof buf);
    if (n < 0) {
      int err = 0;
      const std::string msg = gzerror(f, &err);
      gzclose(f);
      fail("{} '{}' is corrupt ({}): download or reinstall it", what, path, msg);
    }
    if (n == 0) break;
    out.insert(out.end(), buf, buf + n);
  }
  gzclose(f);
  return out;
}

uint32_t big_endian_u32(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

}  // namespace

Dataset read_idx(const std::string& images_path, const std::string& labels_path, int64_t pool) {
  const auto images = read_maybe_gzip(images_path, "IDX image file");
  const auto labels = read_maybe_gzip(labels_path, "IDX label file");
  if (images.size() < 16 || big_endian_u32(images.data()) != 0x00000803)
    fail("IDX image file '{}' does not start with the magic number 0x00000803 (unsigned bytes, "
         "3 dimensions): give an idx3-ubyte images file", images_path);
  if (labels.size() < 8 || big_endian_u32(labels.data()) != 0x00000801)
    fail("IDX label file '{}' does not start with the magic number 0x00000801 (unsigned bytes, "
         "1 dimension): give an idx1-ubyte labels file", labels_path);
  const uint64_t n = big_endian_u32(images.data() + 4);
  const uint64_t h = big_endian_u32(images.data() + 8), w = big_endian_u32(images.data() + 12);
  const uint64_t n_labels = big_endian_u32(labels.data() + 4);
  if (n == 0 || h == 0 || w == 0)
    fail("IDX image file '{}' holds {} images of {}x{}: it has no pixels", images_path, n, h, w);
  const uint64_t pixels = validate::buffer_bytes(n, h * w, "IDX image header");
  if (images.size() != 16 + pixels)
    fail("IDX image file '{}' holds {} bytes of pixels where its header promises {} ({} images "
         "of {}x{}): the file is truncated or corrupt", images_path, images.size() - 16, pixels, n, h, w);
  if (n_labels != n || labels.size() != 8 + n)
    fail("IDX label file '{}' holds {} labels ({} bytes) for {} images in '{}': give the labels "
         "that belong to these images", labels_path, n_labels, labels.size() - 8, n, images_path);

  const auto k = static_cast<uint64_t>(pool);
  if (k < 1 || h % k != 0 || w % k != 0)
    fail("data.image_pool = {} does not divide the {}x{} images of '{}': use a divisor of both sides "
         "(1 keeps every pixel)", pool, h, w, images_path);
  const uint64_t ph = h / k, pw = w / k;
  Dataset d;
  d.source = k == 1 ? images_path : images_path + " (" + std::to_string(k) + "x" + std::to_string(k) + " pooled)";
  d.kind = TaskKind::classification;
  d.rows = static_cast<int64_t>(n);
  d.features = static_cast<int64_t>(ph * pw);
  d.target = "label";
  d.x.assign(n * ph * pw, 0.0f);
  const float scale = 1.0f / (255.0f * static_cast<float>(k * k));
  for (uint64_t i = 0; i < n; ++i) {
    const unsigned char* img = images.data() + 16 + i * h * w;
    float* out = d.x.data() + i * ph * pw;
    for (uint64_t r = 0; r < h; ++r)
      for (uint64_t c = 0; c < w; ++c) out[(r / k) * pw + c / k] += img[r * w + c] * scale;
  }
  d.y.resize(n);
  unsigned max_label = 0;
  for (uint64_t i = 0; i < n; ++i) {
    d.y[i] = labels[8 + i];
    max_label = std::max<unsigned>(max_label, labels[8 + i]);
  }
  d.classes = max_label + 1;
  for (int64_t c = 0; c < d.classes; ++c) d.class_names.push_back(std::to_string(c));
  for (uint64_t i = 0; i < ph * pw; ++i) d.feature_names.push_back("pixel" + std::to_string(i));
  return d;
}

}  // namespace aiscale::tune
