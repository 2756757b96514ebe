// IDX files (the MNIST family's format, e.g. Fashion-MNIST as Debian's
// dataset-fashion-mnist ships it under /usr/share/datasets/fashion-mnist): a big-endian
// header (two zero bytes, a type code, the number of dimensions, one uint32 per
// dimension) followed by the values. Files ending in .gz are read through zlib.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "aiscale/data/images/image_array.h"

namespace aiscale::data {

// An IDX file of unsigned bytes (type code 0x08), the only type image sets use.
struct IdxArray {
  std::vector<int64_t> dims;   // e.g. {60000, 28, 28} for images, {60000} for labels
  std::vector<uint8_t> values; // product(dims) bytes, row-major
};

// Reads `path` (.gz or not). Throws aiscale::Error naming the file for a missing file, a
// bad header, an unsupported value type or a file shorter than its header says.
IdxArray read_idx(const std::string& path);

// Reads an images file (N, H, W) or (N, H, W, C) and its labels file (N); throws aiscale::Error naming both when
// their counts disagree or the images file is not 3- or 4-dimensional.
ImageArray read_idx_image_set(const std::string& images_path, const std::string& labels_path);

// Where Debian's dataset-fashion-mnist puts the files: DIR/{train,t10k}-{images-idx3,
// labels-idx1}-ubyte.gz.
inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";
// Fashion-MNIST's class names in label order.
const std::vector<std::string>& fashion_mnist_class_names();

}  // namespace aiscale::data
