// A stream of labelled image batches for one rank of a data-parallel job: what the vision
// trainer and `aiscale bench loader` read, whatever stores and decodes the images (an
// LMDB of encoded records, data/images/lmdb_source.h; an in-memory set in tests).
//
// Sampling semantics match the token loader's (docs/guide/data.md): an epoch visits the
// N records in a permutation derived from (seed, epoch) only, so every rank computes the
// same one; global batch k is positions [k*G, (k+1)*G), G = world_size * batch_size, and
// rank r takes positions k*G + r*B ... k*G + r*B + B - 1. The N mod G records left at the
// end of an order are skipped in that epoch. With a repeat factor k the order runs over
// k*N positions (each record k times, shuffled together), so an epoch of a reduced set
// keeps the full set's length.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace aiscale::data {

enum class ImageLayout { nchw, nhwc };

// One rank's share of a global batch: pixels normalised ((x/255 - mean[c]) / std[c]),
// fp32, in `layout` order, and one label per image in [0, num_classes).
struct ImageBatch {
  int64_t n = 0, channels = 0, height = 0, width = 0;
  ImageLayout layout = ImageLayout::nchw;
  std::vector<float> pixels;     // n * channels * height * width
  std::vector<int32_t> labels;   // n
};

// What a source has done so far on this rank (for progress lines and summaries).
struct ImageSourceStats {
  int64_t images = 0;          // decoded and served
  int64_t skipped_corrupt = 0; // images of served batches taken from the next position of
                               // the order because their record was corrupt (skip_corrupt)
  double decode_seconds = 0;   // summed over worker threads
  double wait_seconds = 0;     // time next_batch() waited for the workers
};

// A batch served in place: `pixels` and `labels` point into the source's own buffer (which
// the host allocator of ImageSourceConfig may have pinned) and stay valid until the next
// call of next_batch() or next_batch_view().
struct ImageBatchView {
  int64_t n = 0, channels = 0, height = 0, width = 0;
  ImageLayout layout = ImageLayout::nchw;
  const float* pixels = nullptr;   // n * channels * height * width
  const int32_t* labels = nullptr; // n
};

class ImageSource {
 public:
  struct Position {
    int64_t epoch = 0;
    int64_t index = 0;  // global batches served in this epoch
    bool operator==(const Position&) const = default;
  };

  virtual ~ImageSource() = default;
  virtual int64_t num_classes() const = 0;
  // Shape of every served image (after crop/resize).
  virtual int64_t channels() const = 0;
  virtual int64_t height() const = 0;
  virtual int64_t width() const = 0;
  virtual int64_t batch_size() const = 0;           // B: images per rank per batch
  virtual int64_t records() const = 0;              // N: records in the store
  virtual int64_t batches_per_epoch() const = 0;    // global batches per epoch
  // Fills `out` with this rank's share of the next global batch; moves to the next epoch
  // (re-shuffled) after its last batch.
  virtual void next_batch(ImageBatch& out) = 0;
  virtual Position position() const = 0;
  // Throws aiscale::Error when `position` is outside this source's epochs.
  virtual void restore(Position position) = 0;
  virtual ImageSourceStats stats() const = 0;
  // The next batch without a copy (see ImageBatchView). The default serves next_batch()'s
  // result from a buffer of this object; the stores override it to hand out their own.
  virtual void next_batch_view(ImageBatchView& out) {
    if (!view_batch_) view_batch_ = std::make_unique<ImageBatch>();
    next_batch(*view_batch_);
    out = {view_batch_->n, view_batch_->channels, view_batch_->height, view_batch_->width,
           view_batch_->layout, view_batch_->pixels.data(), view_batch_->labels.data()};
  }

 private:
  std::unique_ptr<ImageBatch> view_batch_;
};

}  // namespace aiscale::data

namespace aiscale::data {

// How to open the images written by `aiscale data pack-images` for one rank.
struct ImageSourceConfig {
  std::string path;            // the LMDB directory
  int64_t batch_size = 0;      // B per rank
  int rank = 0;
  int world_size = 1;
  uint64_t seed = 0;
  bool train = true;           // true: shuffled order, random-resized-crop + flip;
                               // false: stored order, centre crop (validation)
  int64_t height = 0;          // served size; 0: the stored images' size
  int64_t width = 0;
  ImageLayout layout = ImageLayout::nchw;
  int threads = 0;             // decoding workers; 0: the cores this rank may use
  int prefetch_batches = 2;    // batches decoded ahead of the consumer
  int64_t repeat = 1;          // k: each record k times per epoch
  std::string stage = "none";  // "none", "ram" (copy into memory), or "local:DIR" (copy there first)
  bool skip_corrupt = false;   // false: a corrupt record stops with an error naming the store,
                               // the record and why; true: it is skipped and counted, with one
                               // warning when the first is met
  std::string skip_corrupt_option = "skip_corrupt = true";  // how the user turns skipping on,
                               // named in those messages (e.g. "data.skip_corrupt = true")
  std::vector<float> mean;     // per channel, in [0,1] units; empty: the set's stored mean
  std::vector<float> std;      // per channel; empty: the set's stored standard deviation

  // Added after the first version of this contract:
  int64_t channels = 0;        // served channels (1 grey, 3 RGB); 0: the store's channels.
                               // Grey is replicated to RGB, RGB averaged to grey
                               // (ITU-R 601 luma), alpha dropped.
  std::string augment = "crop-flip";  // train only: "crop-flip" (random-resized-crop, scale
                               // 0.08-1, ratio 3/4-4/3, + horizontal flip), "flip" (resize +
                               // flip), "none" (resize)
  float center_crop = 0;       // validation: the centred square-ish crop keeps this share of
                               // each side before resizing; 0: 0.875 when resizing, 1 at the
                               // stored size
  bool roi_decode = true;      // JPEG: decode only the crop's rows and columns (libjpeg's
                               // jpeg_skip_scanlines / jpeg_crop_scanline); false: decode the
                               // whole image, then crop (the same pixels, slower)
  // Pinned host memory hook: where set, the batch buffers the workers decode into come from
  // here (e.g. cudaHostAlloc / cudaFreeHost) so a trainer copies them to the GPU
  // asynchronously. Called from the source's constructor and destructor only.
  std::function<void*(size_t bytes)> allocate_host;
  std::function<void(void* pointer)> free_host;
};

// Opens the store at config.path written by `aiscale data pack-images` (an LMDB; see
// docs/guide/images.md). Throws aiscale::Error naming the path for a missing store, one
// written by another tool, or a configuration the store cannot serve.
std::unique_ptr<ImageSource> open_image_source(const ImageSourceConfig& config);

}  // namespace aiscale::data
