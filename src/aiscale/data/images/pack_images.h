// `aiscale data pack-images`: an image folder (ImageFolder layout) or IDX files into an
// image store (store_format.h; docs/guide/images.md).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "aiscale/data/images/store_format.h"

namespace aiscale::data {

struct PackImagesOptions {
  // Exactly one input: an ImageFolder root (one subfolder per class; class index = the
  // subfolders' sorted order; JPEG and PNG files found recursively, sorted by path) ...
  std::string folder;
  // ... or an IDX images file and its labels file (.gz or not).
  std::string idx_images, idx_labels;
  std::string output;                    // the store directory to create
  std::string encode = "png";            // IDX input: png, jpeg or raw
  int jpeg_quality = 90;
  std::vector<std::string> class_names;  // IDX input: one per class (default: "0", "1", ...)
  int64_t max_per_class = 0;             // keep the first M images of each class (0: all)
  int64_t limit = 0;                     // then keep the first N images (0: all)
  bool skip_bad_images = false;          // folder input: skip unreadable files, else fail
  int threads = 0;                       // 0: all cores
};

struct PackImagesSummary {
  ImageStoreMeta meta;
  int64_t bytes = 0;             // encoded image bytes stored
  int64_t skipped_bad = 0;       // unreadable files skipped (skip_bad_images)
  int64_t skipped_other = 0;     // folder files that are not .jpg/.jpeg/.png
  double seconds = 0;
};

struct PackImagesProgress {
  int64_t done = 0, total = 0;
  double seconds = 0;
};

// Packs; calls `progress` from the calling thread every few hundred images. Throws
// aiscale::Error naming the input for an empty class folder, a label out of range, an
// unreadable image (unless skip_bad_images), disagreeing IDX files or an existing output;
// nothing is left at `output` on failure.
PackImagesSummary pack_images(const PackImagesOptions& options,
                              const std::function<void(const PackImagesProgress&)>& progress = {});

}  // namespace aiscale::data
