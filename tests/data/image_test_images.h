// Small synthetic image sets for the image store tests: arrays, IDX files and
// ImageFolder trees of JPEG/PNG files, made with the project's own encoders.
#pragma once
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "aiscale/data/images/codec.h"
#include "aiscale/data/images/image_array.h"

namespace aiscale::data::test_images {

namespace fs = std::filesystem;

// Pixels vary smoothly with position and image index (so crops and flips change them).
inline std::vector<uint8_t> gradient(int64_t w, int64_t h, int64_t c, int64_t seed) {
  std::vector<uint8_t> px(w * h * c);
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x)
      for (int64_t k = 0; k < c; ++k)
        px[(y * w + x) * c + k] = static_cast<uint8_t>((x * 9 + y * 5 + k * 60 + seed * 23) % 256);
  return px;
}

inline ImageArray gradient_array(int64_t n, int64_t h, int64_t w, int64_t c, int64_t classes) {
  ImageArray a;
  a.count = n, a.height = h, a.width = w, a.channels = c;
  for (int64_t i = 0; i < n; ++i) {
    const std::vector<uint8_t> px = gradient(w, h, c, i);
    a.pixels.insert(a.pixels.end(), px.begin(), px.end());
    a.labels.push_back(static_cast<int32_t>((i * 7) % classes));
  }
  return a;
}

inline std::string idx_bytes(const std::vector<uint32_t>& dims, const uint8_t* values, size_t n) {
  std::string s = {0, 0, 0x08, static_cast<char>(dims.size())};
  for (uint32_t d : dims)
    for (int shift = 24; shift >= 0; shift -= 8) s.push_back(static_cast<char>((d >> shift) & 0xff));
  s.append(reinterpret_cast<const char*>(values), n);
  return s;
}

// Files ending in .gz are gzip'd.
inline void write_file(const fs::path& path, const std::string& bytes) {
  if (path.extension() == ".gz") {
    gzFile f = gzopen(path.c_str(), "wb");
    gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
    gzclose(f);
  } else {
    std::ofstream(path, std::ios::binary) << bytes;
  }
}

inline void write_idx(const fs::path& images, const fs::path& labels, const ImageArray& a) {
  std::vector<uint32_t> dims = {static_cast<uint32_t>(a.count), static_cast<uint32_t>(a.height),
                                static_cast<uint32_t>(a.width)};
  if (a.channels != 1) dims.push_back(static_cast<uint32_t>(a.channels));
  write_file(images, idx_bytes(dims, a.pixels.data(), a.pixels.size()));
  std::vector<uint8_t> l(a.labels.begin(), a.labels.end());
  write_file(labels, idx_bytes({static_cast<uint32_t>(a.count)}, l.data(), l.size()));
}

// A JPEG (.jpg) or PNG (.png) file of a gradient image.
inline void write_image(const fs::path& path, int64_t w, int64_t h, int64_t c, int64_t seed) {
  const std::vector<uint8_t> px = gradient(w, h, c, seed);
  const std::vector<uint8_t> bytes =
      path.extension() == ".png" ? encode_png(px.data(), w, h, c) : encode_jpeg(px.data(), w, h, c);
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                              static_cast<std::streamsize>(bytes.size()));
}

// ImageFolder tree: ROOT/<class>/img<i>.jpg (every third a PNG), plus a README at the root
// of the first class (not an image: left out and counted).
inline void write_folder(const fs::path& root, const std::vector<std::pair<std::string, int>>& classes,
                         int64_t w, int64_t h) {
  int64_t seed = 0;
  for (const auto& [name, count] : classes) {
    fs::create_directories(root / name);
    for (int i = 0; i < count; ++i, ++seed)
      write_image(root / name / ("img" + std::to_string(i) + (seed % 3 == 2 ? ".png" : ".jpg")), w, h, 3, seed);
  }
  std::ofstream(root / classes.front().first / "README.txt") << "not an image\n";
}

}  // namespace aiscale::data::test_images
