// The LMDB image source and its worker pipeline; see lmdb_source.h.
#include "aiscale/data/images/lmdb_source.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>

#include "aiscale/core/error.h"
#include "aiscale/core/log.h"
#include "aiscale/data/images/codec.h"

namespace aiscale::data {
namespace {

// A corrupt record is replaced by the next positions of the order, so a batch stays full
// and the replacement does not depend on scheduling; this many failures in a row stop.
constexpr int kMaxCorruptInARow = 64;

// A record as the user can find it: its index and its LMDB key (8 big-endian bytes).
std::string record_name(int64_t record) {
  return fmt::format("record {} (LMDB key 0x{:016x})", record, static_cast<uint64_t>(record));
}

int usable_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

}  // namespace

// One batch buffer: from the host allocator when the config sets one (pinned memory).
struct LmdbImageSource::Slot {
  float* pixels = nullptr;
  int32_t* labels = nullptr;
  int64_t seq = -1;       // the batch sequence being filled here
  int64_t done_seq = -1;  // the last sequence completed here
  int64_t remaining = 0;
  int64_t epoch = 0, first_position = 0;
  std::string error;      // skip_corrupt = false: the first corrupt record's message
  int64_t skipped = 0;    // skip_corrupt = true: corrupt records skipped for this batch
  std::string first_skip; // and why the first of them was
  std::function<void(void*)> release;
  Slot(size_t floats, size_t labels_n, const ImageSourceConfig& c) {
    if (c.allocate_host) {
      pixels = static_cast<float*>(c.allocate_host(floats * sizeof(float)));
      labels = static_cast<int32_t*>(c.allocate_host(labels_n * sizeof(int32_t)));
      if (pixels == nullptr || labels == nullptr)
        fail("the host allocator returned no memory for an image batch of {} bytes", floats * 4);
      release = c.free_host;
    } else {
      pixels = new float[floats];
      labels = new int32_t[labels_n];
    }
  }
  ~Slot() {
    if (release) {
      release(pixels);
      release(labels);
    } else {
      delete[] pixels;
      delete[] labels;
    }
  }
};

LmdbImageSource::LmdbImageSource(const ImageSourceConfig& config) : OrderedImageSource(config) {
  std::string path = config_.path;
  if (config_.stage.rfind("local:", 0) == 0) {
    path = stage_store_locally(path, config_.stage.substr(6));
  } else if (config_.stage != "none" && config_.stage != "ram") {
    fail("unknown image staging '{}': use none, ram or local:DIR", config_.stage);
  }
  reader_ = open_record_reader(path, config_.stage == "ram");
  meta_ = reader_->meta();
  if (meta_.records == 0) fail("image store '{}' holds no images; repack it", config_.path);
  const int64_t height = config_.height > 0 ? config_.height : meta_.height;
  const int64_t width = config_.width > 0 ? config_.width : meta_.width;
  if (height <= 0 || width <= 0)
    fail("image store '{}' holds images of mixed sizes: set the served height and width "
         "(e.g. 224x224)", config_.path);
  if (config_.prefetch_batches < 1)
    fail("prefetch_batches {} must be at least 1", config_.prefetch_batches);
  serve(meta_.records, meta_.channels, height, width, meta_.mean, meta_.std, config_.path);
  threads_ = config_.threads > 0 ? config_.threads : usable_cores();
  const size_t floats = static_cast<size_t>(config_.batch_size * transform_->floats_per_image());
  for (int i = 0; i < config_.prefetch_batches + 1; ++i)
    slots_.push_back(std::make_unique<Slot>(floats, static_cast<size_t>(config_.batch_size), config_));
  start_workers();
}

LmdbImageSource::~LmdbImageSource() { stop_workers(); }

void LmdbImageSource::start_workers() {
  base_ = cursor_->position();
  next_seq_ = next_image_ = released_ = 0;
  holding_ = false;
  stopping_ = false;
  for (auto& slot : slots_) slot->seq = slot->done_seq = -1;
  for (int t = 0; t < threads_; ++t) workers_.emplace_back([this] { worker_main(); });
}

void LmdbImageSource::stop_workers() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  work_ready_.notify_all();
  for (auto& w : workers_) w.join();
  workers_.clear();
}

bool LmdbImageSource::load_image(RecordReader::Handle& records, Decoder& decoder,
                                 std::vector<uint8_t>& pixels, int64_t record, int64_t epoch,
                                 int64_t position, float* out, int32_t& label, std::string& error) {
  const uint8_t* data = nullptr;
  size_t size = 0;
  RecordHeader h;
  if (!records.get(record, data, size)) {
    error = fmt::format("{} is missing", record_name(record));
    return false;
  }
  if (!read_record_header(data, size, h)) {
    error = fmt::format("{} has a malformed header ({} bytes)", record_name(record), size);
    return false;
  }
  if (h.label < 0 || h.label >= meta_.classes) {
    error = fmt::format("{} has label {}, outside [0, {})", record_name(record), h.label,
                        meta_.classes);
    return false;
  }
  const uint8_t* payload = data + kRecordHeaderBytes;
  const size_t payload_size = size - kRecordHeaderBytes;
  PixelView view;
  CropBox box;
  if (h.encoding == ImageEncoding::raw) {
    if (h.channels < 1 || h.channels > 4 || h.width == 0 || h.height == 0 ||
        payload_size != size_t{h.width} * h.height * h.channels) {
      error = fmt::format("{} holds {} raw bytes for {}x{}x{} pixels", record_name(record),
                          payload_size, h.height, h.width, h.channels);
      return false;
    }
    view = {payload, h.width, h.height, h.channels};
    box = transform_->crop_for(h.width, h.height, epoch, position);
  } else {
    ImageHeader full;
    if (!decoder.header(h.encoding, payload, payload_size, full)) {
      error = fmt::format("{} cannot be decoded as {}: {}", record_name(record),
                          to_string(h.encoding), decoder.why());
      return false;
    }
    box = transform_->crop_for(full.width, full.height, epoch, position);
    // Decode at the smallest JPEG scale that keeps the crop at least the served size.
    const double need = std::max(static_cast<double>(transform_->width()) / box.width,
                                 static_cast<double>(transform_->height()) / box.height);
    const int64_t min_w = static_cast<int64_t>(std::ceil(std::min(1.0, need) * full.width));
    const int64_t min_h = static_cast<int64_t>(std::ceil(std::min(1.0, need) * full.height));
    ImageHeader got;
    // JPEG: only the crop's region is decoded; the box moves by the region's offset.
    PixelRect region;
    const bool roi = config_.roi_decode && h.encoding == ImageEncoding::jpeg;
    const bool ok = roi ? decoder.decode_region(payload, payload_size, min_w, min_h, box.x, box.y,
                                                box.width, box.height, pixels, got, region)
                        : decoder.decode(h.encoding, payload, payload_size, min_w, min_h, pixels, got);
    if (!ok) {
      error = fmt::format("{} cannot be decoded as {}: {}", record_name(record),
                          to_string(h.encoding), decoder.why());
      return false;
    }
    if (!roi) region = {0, 0, got.width, got.height};
    const double sx = static_cast<double>(got.width) / full.width;
    const double sy = static_cast<double>(got.height) / full.height;
    box = {box.x * sx - static_cast<double>(region.x), box.y * sy - static_cast<double>(region.y),
           box.width * sx, box.height * sy, box.flip};
    view = {pixels.data(), region.width, region.height, got.channels};
  }
  transform_->apply(view, box, out);
  label = h.label;
  return true;
}

void LmdbImageSource::worker_main() {
  const int64_t B = config_.batch_size, per_image = transform_->floats_per_image();
  const int64_t slots = static_cast<int64_t>(slots_.size());
  std::unique_ptr<RecordReader::Handle> records;
  std::unique_ptr<Decoder> decoder;
  std::vector<uint8_t> pixels;
  std::string setup_error;
  try {
    records = reader_->open_handle();
    decoder = std::make_unique<Decoder>();
  } catch (const std::exception& e) {
    setup_error = e.what();
  }
  for (;;) {
    Slot* slot = nullptr;
    int64_t j = 0;
    {
      std::unique_lock lock(mutex_);
      work_ready_.wait(lock, [&] { return stopping_ || next_seq_ < released_ + slots; });
      if (stopping_) return;
      const int64_t s = next_seq_;
      j = next_image_;
      if (++next_image_ == B) ++next_seq_, next_image_ = 0;
      slot = slots_[s % slots].get();
      if (j == 0) {
        const int64_t index = base_.index + s;
        slot->seq = s;
        slot->epoch = base_.epoch + index / cursor_->batches_per_epoch();
        slot->first_position = cursor_->first_position(index % cursor_->batches_per_epoch());
        slot->remaining = B;
        slot->error.clear();
        slot->skipped = 0;
        slot->first_skip.clear();
      }
    }
    const auto start = std::chrono::steady_clock::now();
    std::string error = setup_error;
    int failures = 0;
    std::string first_why;
    if (error.empty()) {
      const int64_t positions = order_->positions();
      std::string why;
      for (int64_t p = slot->first_position + j;; p = (p + 1) % positions) {
        const int64_t record = order_->record_at(slot->epoch, p);
        bool ok = false;
        try {
          ok = load_image(*records, *decoder, pixels, record, slot->epoch, p,
                          slot->pixels + j * per_image, slot->labels[j], why);
        } catch (const std::exception& e) {
          why = fmt::format("{} cannot be read: {}", record_name(record), e.what());
        }
        if (ok) break;
        if (!config_.skip_corrupt) {
          error = fmt::format("image store '{}': {}; the store is damaged: re-pack it with "
                              "`aiscale data pack-images`, or skip such records with {} "
                              "(they are counted)", config_.path, why, config_.skip_corrupt_option);
          break;
        }
        if (failures == 0) first_why = why;
        if (++failures == kMaxCorruptInARow) {
          error = fmt::format("image store '{}': {} records in a row are corrupt (the last: {}); "
                              "the store is damaged: re-pack it with `aiscale data pack-images`",
                              config_.path, failures, why);
          break;
        }
      }
    }
    decode_nanos_.fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                std::chrono::steady_clock::now() - start).count());
    std::lock_guard lock(mutex_);
    if (!error.empty() && slot->error.empty()) slot->error = error;
    if (failures > 0 && slot->skipped == 0) slot->first_skip = first_why;
    slot->skipped += failures;
    if (--slot->remaining == 0) {
      slot->done_seq = slot->seq;
      batch_ready_.notify_all();
    }
  }
}

void LmdbImageSource::next_batch_view(ImageBatchView& out) {
  std::unique_lock lock(mutex_);
  if (holding_) {
    ++released_;
    holding_ = false;
    work_ready_.notify_all();
  }
  Slot& slot = *slots_[released_ % static_cast<int64_t>(slots_.size())];
  const auto start = std::chrono::steady_clock::now();
  batch_ready_.wait(lock, [&] { return slot.done_seq == released_; });
  wait_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!slot.error.empty()) throw Error(slot.error);
  holding_ = true;
  served_images_ += config_.batch_size;
  skipped_served_ += slot.skipped;
  if (slot.skipped > 0 && !warned_skip_) {
    // Once per source: the count goes to the caller's summary (stats().skipped_corrupt).
    warned_skip_ = true;
    log::warn("image store '{}': {}; it was skipped ({}), as every corrupt record will be, "
              "without a further message: the images are taken from the next records, and the "
              "count of skipped records is reported at the end", config_.path, slot.first_skip,
              config_.skip_corrupt_option);
  }
  cursor_->advance();
  out = {config_.batch_size, transform_->channels(), transform_->height(), transform_->width(),
         config_.layout, slot.pixels, slot.labels};
}

void LmdbImageSource::next_batch(ImageBatch& out) {
  ImageBatchView view;
  next_batch_view(view);
  const size_t floats = static_cast<size_t>(view.n * view.channels * view.height * view.width);
  out.n = view.n;
  out.channels = view.channels;
  out.height = view.height;
  out.width = view.width;
  out.layout = view.layout;
  out.pixels.assign(view.pixels, view.pixels + floats);
  out.labels.assign(view.labels, view.labels + view.n);
}

void LmdbImageSource::restore(Position position) {
  stop_workers();
  try {
    cursor_->restore(position);
  } catch (...) {
    start_workers();
    throw;
  }
  start_workers();
}

ImageSourceStats LmdbImageSource::stats() const {
  std::lock_guard lock(mutex_);
  ImageSourceStats s;
  s.images = served_images_;
  s.skipped_corrupt = skipped_served_;
  s.decode_seconds = static_cast<double>(decode_nanos_.load()) * 1e-9;
  s.wait_seconds = wait_seconds_;
  return s;
}

std::unique_ptr<ImageSource> open_image_source(const ImageSourceConfig& config) {
  return std::make_unique<LmdbImageSource>(config);
}

}  // namespace aiscale::data
