// TensorBoard event files (run.tensorboard): the TFRecord framing TensorBoard reads,
//   uint64 length (little-endian), uint32 masked CRC32C of those 8 bytes,
//   the record, uint32 masked CRC32C of the record,
// where each record is a serialised tensorflow.Event protobuf: wall_time (field 1,
// double), step (2, int64) and either file_version (3, string; the first record,
// "brain.Event:2") or a Summary (5) of Values, each a tag (1, string) and a simple_value
// (2, float). The few protobuf fields are encoded here by hand: no protobuf dependency.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "aiscale/core/non_copyable.h"

namespace aiscale::train {

// CRC-32C (Castagnoli), as the TFRecord framing uses it, and its "masked" form
// (rotated right by 15 bits, plus 0xa282ead8).
uint32_t crc32c(const void* data, size_t n);
uint32_t masked_crc32c(const void* data, size_t n);

// One Event record's bytes (without framing).
std::string tf_event_file_version(double wall_time);
std::string tf_event_scalars(double wall_time, int64_t step,
                             const std::vector<std::pair<std::string, float>>& scalars);
// The framing around one record.
std::string tf_record(std::string_view record);

// Appends events to <dir>/events.out.tfevents.<unix seconds>.<host>; each record is
// written with one write() and the file is flushed per step.
class TfEventsWriter : NonCopyable {
 public:
  explicit TfEventsWriter(const std::string& dir);
  ~TfEventsWriter();
  void scalars(int64_t step, const std::vector<std::pair<std::string, float>>& values);
  const std::string& path() const { return path_; }

 private:
  void write(const std::string& framed);
  std::string path_;
  int fd_ = -1;
};

}  // namespace aiscale::train
