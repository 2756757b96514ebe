#include "aiscale/train/vision_sources.h"

#include <algorithm>
#include <numeric>

#include "aiscale/core/error.h"
#include "aiscale/core/rng.h"
#include "aiscale/data/images/idx.h"
#include "aiscale/data/images/memory_source.h"

namespace aiscale::train {
namespace {

class SyntheticImages final : public data::ImageSource {
 public:
  explicit SyntheticImages(const SyntheticImagesSpec& s) : s_(s) {
    const int64_t global = s_.batch_size * s_.world_size;
    if (s_.images < global) {
      fail("synthetic images: {} images are fewer than one global batch ({} ranks x {}): raise "
           "data.synthetic_images or lower train.batch_size", s_.images, s_.world_size,
           s_.batch_size);
    }
    const int64_t pixels = s_.channels * s_.height * s_.width;
    patterns_.resize(s_.classes * pixels);
    Rng rng(s_.seed ^ 0x5eed5eedULL);
    for (float& v : patterns_) v = rng.normal();
    order_.resize(s_.images);
    shuffle();
  }
  int64_t num_classes() const override { return s_.classes; }
  int64_t channels() const override { return s_.channels; }
  int64_t height() const override { return s_.height; }
  int64_t width() const override { return s_.width; }
  int64_t batch_size() const override { return s_.batch_size; }
  int64_t records() const override { return s_.images; }
  int64_t batches_per_epoch() const override {
    return s_.images / (s_.batch_size * s_.world_size);
  }
  void next_batch(data::ImageBatch& out) override {
    const int64_t B = s_.batch_size, pixels = s_.channels * s_.height * s_.width;
    out.n = B;
    out.channels = s_.channels;
    out.height = s_.height;
    out.width = s_.width;
    out.layout = data::ImageLayout::nchw;
    out.pixels.resize(B * pixels);
    out.labels.resize(B);
    const int64_t first = pos_.index * B * s_.world_size + int64_t(s_.rank) * B;
    for (int64_t b = 0; b < B; ++b) {
      const int64_t record = order_[first + b];
      const int64_t label = record % s_.classes;
      out.labels[b] = int32_t(label);
      // Validation images carry other noise than training images of the same record index.
      Rng rng((s_.seed + (s_.train ? 0 : 0xA5A5A5ULL)) * 0x9E3779B97F4A7C15ULL + uint64_t(record) + 1);
      const float* pattern = patterns_.data() + label * pixels;
      float* dst = out.pixels.data() + b * pixels;
      for (int64_t i = 0; i < pixels; ++i) dst[i] = pattern[i] + s_.noise * rng.normal();
    }
    served_ += B;
    if (++pos_.index == batches_per_epoch()) {
      pos_.index = 0;
      ++pos_.epoch;
      shuffle();
    }
  }
  Position position() const override { return pos_; }
  void restore(Position p) override {
    if (p.epoch < 0 || p.index < 0 || p.index >= batches_per_epoch()) {
      fail("synthetic images: position (epoch {}, batch {}) is outside the {} batches of an "
           "epoch", p.epoch, p.index, batches_per_epoch());
    }
    pos_ = p;
    shuffle();
  }
  data::ImageSourceStats stats() const override { return {served_, 0, 0.0, 0.0}; }

 private:
  void shuffle() {
    std::iota(order_.begin(), order_.end(), int64_t{0});
    if (!s_.train) return;
    Rng rng(s_.seed + 0x1000193ULL * uint64_t(pos_.epoch + 1));
    for (int64_t i = s_.images - 1; i > 0; --i) {
      std::swap(order_[i], order_[int64_t(rng.below(uint64_t(i + 1)))]);
    }
  }
  SyntheticImagesSpec s_;
  std::vector<float> patterns_;
  std::vector<int64_t> order_;
  Position pos_;
  int64_t served_ = 0;
};

}  // namespace

std::string idx_labels_path(const std::string& images_path) {
  const std::string from = "images-idx3", to = "labels-idx1";
  const auto at = images_path.rfind(from);
  if (at == std::string::npos)
    fail("data.train/data.val '{}': an IDX images file is named ...-images-idx3-ubyte[.gz], "
         "with its labels in ...-labels-idx1-ubyte[.gz] beside it", images_path);
  return images_path.substr(0, at) + to + images_path.substr(at + from.size());
}

std::unique_ptr<data::ImageSource> make_synthetic_images(const SyntheticImagesSpec& spec) {
  return std::make_unique<SyntheticImages>(spec);
}

std::unique_ptr<data::ImageSource> open_vision_source(const VisionTrainConfig& c, bool train,
                                                      int rank, int world_size) {
  if (c.data_kind == "synthetic") {
    SyntheticImagesSpec s;
    // The validation set: a quarter of the images, other noise (seed), the same patterns.
    s.images = train ? c.synthetic_images : std::max<int64_t>(c.synthetic_images / 4,
                                                             c.batch_size * world_size);
    s.channels = c.synthetic_channels;
    s.height = s.width = c.image_size > 0 ? c.image_size : 32;
    s.classes = c.synthetic_classes;
    s.batch_size = c.batch_size;
    s.rank = rank;
    s.world_size = world_size;
    s.seed = c.seed;
    s.train = train;
    auto source = make_synthetic_images(s);
    return source;
  }
  const std::string& path = train ? c.train_data : c.val_data;
  if (path.empty()) return nullptr;
  data::ImageSourceConfig sc;
  sc.path = path;
  sc.batch_size = c.batch_size;
  sc.rank = rank;
  sc.world_size = world_size;
  sc.seed = c.seed;
  sc.train = train;
  sc.height = sc.width = c.image_size;
  sc.layout = data::ImageLayout::nchw;
  sc.threads = int(c.loader_threads);
  sc.repeat = train ? c.repeat : 1;
  sc.stage = c.stage;
  sc.augment = c.augment;
  sc.skip_corrupt = c.skip_corrupt;
  sc.skip_corrupt_option = "data.skip_corrupt = true";
  if (c.data_kind == "lmdb") return data::open_image_source(sc);
  // idx: the images file names its labels file (Fashion-MNIST's and MNIST's naming).
  const std::string labels = idx_labels_path(path);
  return std::make_unique<data::MemoryImageSource>(data::read_idx_image_set(path, labels),
                                                   c.num_classes, sc);
}

const nn::Batch& ImageFeed::next() {
  source_.next_batch(batch_);
  if (batch_.layout != data::ImageLayout::nchw)
    fail("the vision trainer takes NCHW batches; the image source served NHWC");
  out_.images = batch_.pixels.data();
  out_.labels = batch_.labels.data();
  out_.n = batch_.n;
  return out_;
}

int64_t ImageFeed::eval_batches(int64_t requested) const {
  return requested > 0 ? std::min(requested, source_.batches_per_epoch())
                       : source_.batches_per_epoch();
}

}  // namespace aiscale::train
