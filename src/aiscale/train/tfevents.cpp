#include "aiscale/train/tfevents.h"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "aiscale/core/error.h"
#include "aiscale/core/fs.h"

namespace aiscale::train {
namespace {

// The byte-at-a-time table of the reflected Castagnoli polynomial 0x82F63B78.
constexpr std::array<uint32_t, 256> make_crc_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1u) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr std::array<uint32_t, 256> kCrcTable = make_crc_table();

// Protobuf wire format: varints, and tags (field number << 3 | wire type).
void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}
void put_tag(std::string& out, int field, int wire_type) {
  put_varint(out, static_cast<uint64_t>(field) << 3 | static_cast<uint64_t>(wire_type));
}
template <typename T>
void put_fixed(std::string& out, T v) {  // little-endian hosts only (x86-64, aarch64)
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.append(b, sizeof(T));
}
void put_bytes(std::string& out, int field, std::string_view bytes) {
  put_tag(out, field, 2);
  put_varint(out, bytes.size());
  out.append(bytes);
}

std::string event_head(double wall_time, int64_t step) {
  std::string e;
  put_tag(e, 1, 1);  // wall_time: double, 64-bit
  put_fixed(e, wall_time);
  if (step != 0) {
    put_tag(e, 2, 0);  // step: int64 varint
    put_varint(e, static_cast<uint64_t>(step));
  }
  return e;
}

double now_unix_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

uint32_t crc32c(const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) c = kCrcTable[(c ^ p[i]) & 0xFFu] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(const void* data, size_t n) {
  const uint32_t c = crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

std::string tf_event_file_version(double wall_time) {
  std::string e = event_head(wall_time, 0);
  put_bytes(e, 3, "brain.Event:2");
  return e;
}

std::string tf_event_scalars(double wall_time, int64_t step,
                             const std::vector<std::pair<std::string, float>>& scalars) {
  std::string summary;
  for (const auto& [tag, value] : scalars) {
    std::string v;
    put_bytes(v, 1, tag);
    put_tag(v, 2, 5);  // simple_value: float, 32-bit
    put_fixed(v, value);
    put_bytes(summary, 1, v);
  }
  std::string e = event_head(wall_time, step);
  put_bytes(e, 5, summary);
  return e;
}

std::string tf_record(std::string_view record) {
  std::string out;
  const uint64_t len = record.size();
  put_fixed(out, len);
  put_fixed(out, masked_crc32c(out.data(), 8));
  out.append(record);
  put_fixed(out, masked_crc32c(record.data(), record.size()));
  return out;
}

TfEventsWriter::TfEventsWriter(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) fail("run.tensorboard: cannot create '{}': {}; choose a run.dir you can write to", dir, ec.message());
  const double t = now_unix_s();
  path_ = (std::filesystem::path(dir) /
           fmt::format("events.out.tfevents.{}.{}", static_cast<int64_t>(t), host_name()))
              .string();
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0)
    fail("run.tensorboard: cannot create '{}': {}; choose a run.dir you can write to", path_,
         std::strerror(errno));
  write(tf_record(tf_event_file_version(t)));
}

TfEventsWriter::~TfEventsWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void TfEventsWriter::scalars(int64_t step, const std::vector<std::pair<std::string, float>>& values) {
  write(tf_record(tf_event_scalars(now_unix_s(), step, values)));
}

void TfEventsWriter::write(const std::string& framed) {
  const ssize_t n = ::write(fd_, framed.data(), framed.size());
  if (n != static_cast<ssize_t>(framed.size()))
    fail("cannot write the TensorBoard event file '{}': {}", path_,
         n < 0 ? std::strerror(errno) : "short write (disk full?)");
}

}  // namespace aiscale::train
