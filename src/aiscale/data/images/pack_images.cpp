// Packing images into a store; see pack_images.h and docs/guide/images.md.
#include "aiscale/data/images/pack_images.h"

#include <omp.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include "aiscale/core/ascii.h"
#include "aiscale/core/error.h"
#include "aiscale/core/fs.h"
#include "aiscale/data/images/codec.h"
#include "aiscale/data/images/idx.h"

namespace aiscale::data {
namespace fs = std::filesystem;
namespace {

constexpr int64_t kChunk = 256;  // images prepared in parallel, then written in order

// One image ready to store, with its exact pixel sums (in RGB: grey counts in all three
// channels) so the statistics do not depend on the thread count.
struct Prepared {
  RecordHeader header;
  std::vector<uint8_t> bytes;
  std::array<uint64_t, 3> sum{}, sum_sq{};
  uint64_t pixels = 0;
  bool colour = false;
  std::string error;
};

void add_pixel_sums(const uint8_t* px, int64_t w, int64_t h, int64_t c, Prepared& p) {
  const int64_t n = w * h;
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t* q = px + i * c;
    for (int k = 0; k < 3; ++k) {
      const uint64_t v = c >= 3 ? q[k] : q[0];
      p.sum[k] += v;
      p.sum_sq[k] += v * v;
    }
  }
  p.pixels += static_cast<uint64_t>(n);
  p.colour = c >= 3;
}

struct Item {
  std::string path;     // folder input
  int64_t index = 0;    // IDX input
  int32_t label = 0;
};

// The first max_per_class items of each label, then the first `limit`.
std::vector<Item> reduce(std::vector<Item> items, int64_t max_per_class, int64_t limit) {
  if (max_per_class > 0) {
    std::map<int32_t, int64_t> kept;
    std::vector<Item> out;
    for (auto& item : items)
      if (kept[item.label]++ < max_per_class) out.push_back(std::move(item));
    items = std::move(out);
  }
  if (limit > 0 && static_cast<int64_t>(items.size()) > limit) items.resize(limit);
  return items;
}

bool is_image_file(const fs::path& path) {
  const std::string ext = ascii_lower(path.extension().string());
  return ext == ".jpg" || ext == ".jpeg" || ext == ".png";
}

bool hidden(const fs::path& path) {
  const std::string name = path.filename().string();
  return !name.empty() && name[0] == '.';
}

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Lists an ImageFolder root: classes and their files, sorted.
std::vector<Item> list_folder(const std::string& root, std::vector<std::string>& classes,
                              int64_t& skipped_other, size_t& total_bytes) {
  if (!fs::is_directory(root))
    fail("image folder '{}' does not exist or is not a folder; pass the root of an ImageFolder "
         "layout (one subfolder per class)", root);
  for (const auto& entry : fs::directory_iterator(root))
    if (entry.is_directory() && !hidden(entry.path())) classes.push_back(entry.path().filename().string());
  std::sort(classes.begin(), classes.end());
  if (classes.empty())
    fail("image folder '{}' has no class subfolders; put each class's images in a subfolder "
         "named after the class (ImageFolder layout)", root);
  std::vector<Item> items;
  for (size_t label = 0; label < classes.size(); ++label) {
    const fs::path dir = fs::path(root) / classes[label];
    std::vector<std::string> files;
    for (auto it = fs::recursive_directory_iterator(dir); it != fs::recursive_directory_iterator(); ++it) {
      if (hidden(it->path())) {
        if (it->is_directory()) it.disable_recursion_pending();
        continue;
      }
      if (!it->is_regular_file()) continue;
      if (is_image_file(it->path())) {
        files.push_back(it->path().string());
        total_bytes += it->file_size();
      } else {
        ++skipped_other;
      }
    }
    if (files.empty())
      fail("class folder '{}' holds no .jpg, .jpeg or .png images; add images or remove the "
           "folder (class indices follow the sorted folder names)", dir.string());
    std::sort(files.begin(), files.end());
    for (auto& f : files) items.push_back({std::move(f), 0, static_cast<int32_t>(label)});
  }
  return items;
}

Prepared prepare_file(const Item& item, Decoder& decoder) {
  Prepared p;
  p.bytes = read_bytes(item.path);
  p.header.label = item.label;
  ImageEncoding encoding;
  if (p.bytes.empty() || !sniff_encoding(p.bytes.data(), p.bytes.size(), encoding)) {
    p.error = fmt::format("'{}' is empty or not a JPEG or PNG file", item.path);
    return p;
  }
  std::vector<uint8_t> pixels;
  ImageHeader h;
  if (!decoder.decode(encoding, p.bytes.data(), p.bytes.size(), 0, 0, pixels, h)) {
    p.error = fmt::format("'{}' cannot be decoded as {}: {}", item.path, to_string(encoding), decoder.why());
    return p;
  }
  p.header.encoding = encoding;
  p.header.channels = static_cast<uint8_t>(h.channels);
  p.header.width = static_cast<uint32_t>(h.width);
  p.header.height = static_cast<uint32_t>(h.height);
  add_pixel_sums(pixels.data(), h.width, h.height, h.channels, p);
  return p;
}

Prepared prepare_idx(const Item& item, const ImageArray& set, ImageEncoding encoding, int quality) {
  Prepared p;
  const int64_t bytes = set.height * set.width * set.channels;
  const uint8_t* px = set.pixels.data() + item.index * bytes;
  p.header = {item.label, encoding, static_cast<uint8_t>(set.channels),
              static_cast<uint32_t>(set.width), static_cast<uint32_t>(set.height)};
  if (encoding == ImageEncoding::raw)
    p.bytes.assign(px, px + bytes);
  else if (encoding == ImageEncoding::png)
    p.bytes = encode_png(px, set.width, set.height, set.channels);
  else
    p.bytes = encode_jpeg(px, set.width, set.height, set.channels, quality);
  add_pixel_sums(px, set.width, set.height, set.channels, p);
  return p;
}

}  // namespace

PackImagesSummary pack_images(const PackImagesOptions& o,
                              const std::function<void(const PackImagesProgress&)>& progress) {
  const auto start = std::chrono::steady_clock::now();
  const bool from_folder = !o.folder.empty();
  if (from_folder == (!o.idx_images.empty() || !o.idx_labels.empty()))
    fail("pack-images needs one input: an image folder, or an IDX images file with its labels file");
  if (!from_folder && (o.idx_images.empty() || o.idx_labels.empty()))
    fail("IDX input needs both the images file and the labels file");
  if (o.output.empty()) fail("pack-images needs an output directory");
  if (fs::exists(o.output))
    fail("output '{}' already exists; remove it or choose another --output", o.output);
  if (o.max_per_class < 0 || o.limit < 0) fail("--max-per-class and --limit must not be negative");

  PackImagesSummary summary;
  ImageStoreMeta& meta = summary.meta;
  std::vector<Item> items;
  ImageArray set;
  ImageEncoding idx_encoding = ImageEncoding::png;
  size_t expected_bytes = 0;
  if (from_folder) {
    items = list_folder(o.folder, meta.class_names, summary.skipped_other, expected_bytes);
    meta.source = "folder";
  } else {
    if (o.encode == "raw") idx_encoding = ImageEncoding::raw;
    else if (o.encode == "jpeg") idx_encoding = ImageEncoding::jpeg;
    else if (o.encode != "png") fail("--encode '{}': use png, jpeg or raw", o.encode);
    set = read_idx_image_set(o.idx_images, o.idx_labels);
    if (idx_encoding == ImageEncoding::jpeg && set.channels != 1 && set.channels != 3)
      fail("IDX images '{}' have {} channels; JPEG stores 1 or 3: use --encode png or raw",
           o.idx_images, set.channels);
    const int32_t max_label = set.count > 0 ? *std::max_element(set.labels.begin(), set.labels.end()) : 0;
    meta.class_names = o.class_names;
    if (meta.class_names.empty())
      for (int32_t k = 0; k <= max_label; ++k) meta.class_names.push_back(std::to_string(k));
    for (int64_t i = 0; i < set.count; ++i)
      if (set.labels[i] >= static_cast<int32_t>(meta.class_names.size()))
        fail("IDX labels '{}': image {} has label {}, outside the {} class names given; pass a "
             "name for every class or the labels file that belongs to these images",
             o.idx_labels, i, set.labels[i], meta.class_names.size());
    for (int64_t i = 0; i < set.count; ++i) items.push_back({"", i, set.labels[i]});
    expected_bytes = static_cast<size_t>(set.pixels.size()) + static_cast<size_t>(set.count) * 64;
    meta.source = "idx";
  }
  meta.classes = static_cast<int64_t>(meta.class_names.size());
  items = reduce(std::move(items), o.max_per_class, o.limit);
  if (items.empty()) fail("pack-images: no images to pack from '{}'", from_folder ? o.folder : o.idx_images);

  ImageStoreWriter writer(o.output, expected_bytes);
  std::array<uint64_t, 3> sum{}, sum_sq{};
  uint64_t pixels = 0;
  bool colour = false, mixed = false;
  int64_t height = 0, width = 0;
  const int threads = o.threads > 0 ? o.threads : omp_get_max_threads();
  const int64_t total = static_cast<int64_t>(items.size());
  std::vector<Prepared> chunk(kChunk);
  for (int64_t first = 0; first < total; first += kChunk) {
    const int64_t n = std::min(kChunk, total - first);
    std::vector<std::string> errors(threads);
#pragma omp parallel num_threads(threads)
    {
      Decoder decoder;
#pragma omp for schedule(dynamic, 4)
      for (int64_t i = 0; i < n; ++i) {
        try {
          chunk[i] = from_folder ? prepare_file(items[first + i], decoder)
                                 : prepare_idx(items[first + i], set, idx_encoding, o.jpeg_quality);
        } catch (const std::exception& e) {
          chunk[i] = Prepared{};
          chunk[i].error = e.what();
        }
      }
    }
    for (int64_t i = 0; i < n; ++i) {
      Prepared& p = chunk[i];
      if (!p.error.empty()) {
        if (!o.skip_bad_images || !from_folder)
          fail("{}; remove or replace the file, or pass --skip-bad-images to leave such files out",
               p.error);
        ++summary.skipped_bad;
        continue;
      }
      writer.add(p.header, p.bytes.data(), p.bytes.size());
      summary.bytes += static_cast<int64_t>(p.bytes.size());
      for (int k = 0; k < 3; ++k) sum[k] += p.sum[k], sum_sq[k] += p.sum_sq[k];
      pixels += p.pixels;
      colour = colour || p.colour;
      if (height == 0) height = p.header.height, width = p.header.width;
      mixed = mixed || height != p.header.height || width != p.header.width;
    }
    if (progress)
      progress({first + n, total, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()});
  }
  if (writer.records() == 0) fail("pack-images: every image of '{}' was unreadable", o.folder);
  meta.channels = colour ? 3 : 1;
  for (int k = 0; k < meta.channels; ++k) {
    const double mean = static_cast<double>(sum[k]) / static_cast<double>(pixels) / 255.0;
    const double var = static_cast<double>(sum_sq[k]) / static_cast<double>(pixels) / (255.0 * 255.0) - mean * mean;
    meta.mean.push_back(static_cast<float>(mean));
    meta.std.push_back(var > 1e-12 ? static_cast<float>(std::sqrt(var)) : 1.0f);
  }
  meta.height = mixed ? 0 : height;
  meta.width = mixed ? 0 : width;
  meta.created = utc_iso8601();
  writer.finish(meta);
  meta.records = writer.records();
  summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return summary;
}

}  // namespace aiscale::data
