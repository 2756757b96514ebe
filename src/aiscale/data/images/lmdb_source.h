// The ImageSource over a store written by `aiscale data pack-images` (store_format.h):
// worker threads read records (from the LMDB's memory map, or from a RAM copy), decode
// them (TurboJPEG, libpng), crop, flip, resize and normalise them into reusable batch
// buffers `prefetch_batches` ahead of the consumer. Semantics in image_source.h and
// docs/guide/images.md; served pixels depend on (seed, epoch, position) only, never on
// the thread count or scheduling.
#pragma once
#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "aiscale/data/images/image_source.h"
#include "aiscale/data/images/ordered_source.h"
#include "aiscale/data/images/record_reader.h"
#include "aiscale/data/images/sample_order.h"
#include "aiscale/data/images/store_format.h"
#include "aiscale/data/images/transform.h"

namespace aiscale::data {

class Decoder;  // codec.h

class LmdbImageSource final : public OrderedImageSource {
 public:
  explicit LmdbImageSource(const ImageSourceConfig& config);
  ~LmdbImageSource() override;

  int64_t num_classes() const override { return meta_.classes; }
  int64_t records() const override { return meta_.records; }
  void next_batch(ImageBatch& out) override;
  void next_batch_view(ImageBatchView& out) override;
  void restore(Position position) override;
  ImageSourceStats stats() const override;

  const ImageStoreMeta& meta() const { return meta_; }
  int threads() const { return threads_; }

 private:
  struct Slot;
  void start_workers();
  void stop_workers();
  void worker_main();
  // Decodes `record` into `out`; false when the record is corrupt (why in `error`).
  bool load_image(RecordReader::Handle& records, Decoder& decoder, std::vector<uint8_t>& pixels,
                  int64_t record, int64_t epoch, int64_t position, float* out, int32_t& label,
                  std::string& error);

  ImageStoreMeta meta_;
  std::unique_ptr<RecordReader> reader_;
  int threads_ = 1;

  // The pipeline: batch sequence s (counted from start_workers()) fills slot s % slots;
  // workers take images (s, j) in order while s < released_ + slots.
  std::vector<std::unique_ptr<Slot>> slots_;
  std::vector<std::thread> workers_;
  mutable std::mutex mutex_;
  std::condition_variable work_ready_, batch_ready_;
  bool stopping_ = false;
  Position base_;             // the position of sequence 0
  int64_t next_seq_ = 0, next_image_ = 0;
  int64_t released_ = 0;      // sequences before this one are free
  bool holding_ = false;      // the consumer holds sequence released_
  int64_t served_images_ = 0;
  int64_t skipped_served_ = 0;  // corrupt records skipped in the batches served
  bool warned_skip_ = false;    // the one warning of skip_corrupt is given
  std::atomic<int64_t> decode_nanos_{0};
  double wait_seconds_ = 0;
};

}  // namespace aiscale::data
