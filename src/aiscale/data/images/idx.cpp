// IDX reading; format in idx.h.
#include "aiscale/data/images/idx.h"

#include <zlib.h>

#include <filesystem>

#include "aiscale/core/error.h"

namespace aiscale::data {
namespace {

// The whole file, inflated when it is gzip'd (gzread passes plain files through).
std::vector<uint8_t> read_maybe_gzip(const std::string& path) {
  if (!std::filesystem::is_regular_file(path))
    fail("IDX file '{}' does not exist; for Fashion-MNIST install Debian's "
         "dataset-fashion-mnist (scripts/setup.sh), which puts the files under {}",
         path, kFashionMnistDir);
  gzFile file = gzopen(path.c_str(), "rb");
  if (file == nullptr) fail("cannot open IDX file '{}': check its permissions", path);
  std::vector<uint8_t> bytes;
  std::vector<uint8_t> chunk(1 << 20);
  for (;;) {
    const int n = gzread(file, chunk.data(), static_cast<unsigned>(chunk.size()));
    if (n < 0) {
      int code = 0;
      const std::string message = gzerror(file, &code);
      gzclose(file);
      fail("IDX file '{}' is corrupt ({}); fetch or reinstall it", path, message);
    }
    if (n == 0) break;
    bytes.insert(bytes.end(), chunk.begin(), chunk.begin() + n);
  }
  gzclose(file);
  return bytes;
}

uint32_t big_endian_u32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

}  // namespace

IdxArray read_idx(const std::string& path) {
  const std::vector<uint8_t> bytes = read_maybe_gzip(path);
  if (bytes.size() < 4 || bytes[0] != 0 || bytes[1] != 0)
    fail("'{}' is not an IDX file (it should start with two zero bytes, a type code and a "
         "dimension count); pass the images and labels files of an MNIST-style set", path);
  if (bytes[2] != 0x08)
    fail("IDX file '{}' holds values of type 0x{:02x}; only unsigned bytes (0x08) are "
         "supported for images and labels", path, bytes[2]);
  const int rank = bytes[3];
  if (rank < 1 || rank > 4 || bytes.size() < 4 + 4 * static_cast<size_t>(rank))
    fail("IDX file '{}' has a bad header ({} dimensions); the file is truncated or not IDX",
         path, rank);
  IdxArray array;
  uint64_t total = 1;
  for (int d = 0; d < rank; ++d) {
    const uint32_t size = big_endian_u32(bytes.data() + 4 + 4 * d);
    array.dims.push_back(size);
    // Checked before the product: 2^40 x a 32-bit dimension can wrap past 2^64 to a small
    // count that a short file would then satisfy.
    constexpr uint64_t kLimit = uint64_t{1} << 40;
    if (size != 0 && total > kLimit / size)
      fail("IDX file '{}' declares an implausible size ({} dimensions, dimension {} is {}); the "
           "header is corrupt: fetch or reinstall it", path, rank, d + 1, size);
    total *= size;
  }
  const size_t header = 4 + 4 * static_cast<size_t>(rank);
  if (bytes.size() - header < total)
    fail("IDX file '{}' is truncated: its header declares {} values but it holds {}; "
         "fetch or reinstall it", path, total, bytes.size() - header);
  array.values.assign(bytes.begin() + header, bytes.begin() + header + total);
  return array;
}

ImageArray read_idx_image_set(const std::string& images_path, const std::string& labels_path) {
  IdxArray images = read_idx(images_path);
  IdxArray labels = read_idx(labels_path);
  if (images.dims.size() != 3 && images.dims.size() != 4)
    fail("IDX images file '{}' has {} dimension(s); images need 3 (N, H, W) or 4 "
         "(N, H, W, C) — is it a labels file?", images_path, images.dims.size());
  if (labels.dims.size() != 1)
    fail("IDX labels file '{}' has {} dimensions; labels need 1 (N) — is it an images file?",
         labels_path, labels.dims.size());
  if (images.dims[0] != labels.dims[0])
    fail("IDX files disagree: '{}' holds {} images but '{}' holds {} labels; pass the labels "
         "file that belongs to these images (train with train, t10k with t10k)",
         images_path, images.dims[0], labels_path, labels.dims[0]);
  ImageArray set;
  set.count = images.dims[0];
  set.height = images.dims[1];
  set.width = images.dims[2];
  set.channels = images.dims.size() == 4 ? images.dims[3] : 1;
  if (set.channels != 1 && set.channels != 3 && set.channels != 4)
    fail("IDX images file '{}' has {} channels; 1, 3 or 4 are supported", images_path, set.channels);
  set.pixels = std::move(images.values);
  set.labels.assign(labels.values.begin(), labels.values.end());
  return set;
}

const std::vector<std::string>& fashion_mnist_class_names() {
  static const std::vector<std::string> names = {"T-shirt/top", "Trouser", "Pullover", "Dress",
                                                 "Coat", "Sandal", "Shirt", "Sneaker", "Bag",
                                                 "Ankle boot"};
  return names;
}

}  // namespace aiscale::data
