// The on-disk format of an aiscale image store (docs/guide/images.md#record-format):
// an LMDB directory whose key "aiscale.images" holds JSON metadata and whose records are
// keyed by their index as 8 big-endian bytes, so LMDB's key order is the stored order.
// A record value is a 16-byte little-endian header followed by the encoded image:
//   int32 label | uint8 encoding (0 raw, 1 jpeg, 2 png) | uint8 channels | uint16 0 |
//   uint32 width | uint32 height | bytes (raw: height * width * channels pixels, HWC)
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "aiscale/data/images/codec.h"

namespace aiscale::data {

inline constexpr const char* kImageStoreMetaKey = "aiscale.images";
inline constexpr const char* kImageStoreFormat = "aiscale-images";
inline constexpr int kImageStoreVersion = 1;
inline constexpr size_t kRecordHeaderBytes = 16;

// What the metadata key says about the whole store.
struct ImageStoreMeta {
  int64_t records = 0;
  int64_t classes = 0;
  std::vector<std::string> class_names;  // one per class, in label order
  int64_t channels = 0;                  // 1 or 3: what statistics and default serving use
  int64_t height = 0, width = 0;         // 0 when the stored sizes are mixed
  std::vector<float> mean, std;          // per channel, [0,1] units
  std::string source;                    // "folder" or "idx"
  std::string created;                   // UTC, ISO 8601

  nlohmann::json to_json() const;
  // Throws aiscale::Error naming `store` for a foreign or malformed metadata value.
  static ImageStoreMeta from_json(const std::string& text, const std::string& store);
};

struct RecordHeader {
  int32_t label = 0;
  ImageEncoding encoding = ImageEncoding::raw;
  uint8_t channels = 0;
  uint32_t width = 0, height = 0;
};

std::string record_key(int64_t index);  // 8 big-endian bytes
void write_record_header(const RecordHeader& header, uint8_t* out);
// false when `size` is too short for a header or the encoding byte is unknown.
bool read_record_header(const uint8_t* value, size_t size, RecordHeader& header);

// Writes a store: records in index order, then the metadata, into DIR.tmp-PID; finish()
// renames it to DIR. A writer destroyed before finish() removes its temporary directory,
// so a failed pack leaves nothing behind. Throws aiscale::Error if DIR exists.
class ImageStoreWriter {
 public:
  // expected_bytes: an estimate of the payload, to size LMDB's map (grown when needed).
  ImageStoreWriter(const std::string& dir, size_t expected_bytes);
  ~ImageStoreWriter();
  ImageStoreWriter(const ImageStoreWriter&) = delete;
  ImageStoreWriter& operator=(const ImageStoreWriter&) = delete;

  void add(const RecordHeader& header, const uint8_t* bytes, size_t size);
  int64_t records() const { return records_; }
  // meta.records is set to the records added.
  void finish(ImageStoreMeta meta);

 private:
  void commit_batch();
  void grow_map(size_t at_least);
  void begin_transaction();

  std::string dir_, temp_dir_;
  void* env_ = nullptr;  // MDB_env*
  void* txn_ = nullptr;  // MDB_txn*
  unsigned dbi_ = 0;
  size_t map_size_ = 0, txn_bytes_ = 0, written_bytes_ = 0;
  int64_t records_ = 0;
  std::vector<uint8_t> value_;
};

}  // namespace aiscale::data
