#include "aiscale/train/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <nlohmann/json.hpp>

#include "aiscale/core/dtype.h"
#include "aiscale/core/error.h"

namespace aiscale::train {
namespace {

// A header larger than this is corrupt (the format's own limit is 100 MB); bounding it
// keeps a damaged length from sizing a read.
constexpr uint64_t kMaxHeaderBytes = uint64_t{100} << 20;

// Bytes per element of the format's dtypes; 0 for a name the format does not define.
uint64_t element_bytes(std::string_view dtype) {
  if (dtype == "F64" || dtype == "I64" || dtype == "U64") return 8;
  if (dtype == "F32" || dtype == "I32" || dtype == "U32") return 4;
  if (dtype == "BF16" || dtype == "F16" || dtype == "I16" || dtype == "U16") return 2;
  if (dtype == "BOOL" || dtype == "U8" || dtype == "I8" || dtype == "F8_E4M3" ||
      dtype == "F8_E5M2")
    return 1;
  return 0;
}

uint64_t header_length(const unsigned char* first8) {
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(first8[i]) << (8 * i);
  return n;
}

// The header's tensors, each range checked against the `file_size` bytes of the file;
// `data_start` is where the tensor bytes begin (8 + the header's length).
std::map<std::string, SafeTensorInfo> parse_header(std::string_view json, uint64_t data_start,
                                                   uint64_t file_size, const std::string& source) {
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(json);
  } catch (const nlohmann::json::exception& e) {
    fail("'{}' has a corrupt safetensors header: {}", source, e.what());
  }
  if (!header.is_object())
    fail("'{}' has a corrupt safetensors header: it is not a JSON object", source);
  const uint64_t data_size = file_size - data_start;
  std::map<std::string, SafeTensorInfo> out;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    const auto& e = it.value();
    SafeTensorInfo t;
    t.name = it.key();
    std::vector<uint64_t> off;
    try {  // a header of the wrong types is corrupt, not a library error
      t.dtype = e.at("dtype").get<std::string>();
      for (const auto& d : e.at("shape")) {
        if (!d.is_number_integer() || d.get<int64_t>() < 0 || d.get<int64_t>() > (int64_t{1} << 40))
          fail("'{}' is corrupt: tensor '{}' has the impossible dimension {}", source, t.name, d.dump());
        t.shape.push_back(d.get<int64_t>());
      }
      for (const auto& o : e.at("data_offsets")) {
        if (!o.is_number_unsigned() && !(o.is_number_integer() && o.get<int64_t>() >= 0))
          fail("'{}' is corrupt: tensor '{}' has the offset {}", source, t.name, o.dump());
        off.push_back(o.get<uint64_t>());
      }
    } catch (const nlohmann::json::exception& ex) {
      fail("'{}' has a corrupt safetensors header at tensor '{}': {}", source, t.name, ex.what());
    }
    if (off.size() != 2 || off[1] < off[0] || off[1] > data_size)
      fail("'{}' is truncated or corrupt: tensor '{}' lies outside the file (bytes {} of {} "
           "after the header)", source, t.name,
           off.size() == 2 ? std::to_string(off[0]) + ".." + std::to_string(off[1]) : "?", data_size);
    // The element count is bounded by the bytes present before anything is allocated: a
    // shape whose product overflows or exceeds its byte range is corrupt.
    const uint64_t elem = element_bytes(t.dtype);
    uint64_t numel = 1;
    for (int64_t d : t.shape)
      if (__builtin_mul_overflow(numel, static_cast<uint64_t>(d), &numel) || numel > data_size)
        numel = UINT64_MAX;
    if (elem != 0 && (numel > data_size / elem || off[1] - off[0] != numel * elem))
      fail("'{}' is corrupt: tensor '{}' of shape {} and dtype {} does not fill its {} bytes",
           source, t.name, nlohmann::json(t.shape).dump(), t.dtype, off[1] - off[0]);
    t.begin = data_start + off[0];
    t.end = data_start + off[1];
    out.emplace(t.name, std::move(t));
  }
  return out;
}

// Converts `numel` values of a readable dtype at `p` into fp32.
void decode(const std::string& dtype, const char* p, uint64_t numel, float* out) {
  if (numel == 0) return;  // an empty tensor: `out` may be null (an empty vector's data())
  if (dtype == "F32") {
    std::memcpy(out, p, static_cast<size_t>(numel) * 4);
    return;
  }
  const bool bf16 = dtype == "BF16";
  for (uint64_t i = 0; i < numel; ++i) {
    uint16_t h;
    std::memcpy(&h, p + 2 * i, 2);
    out[i] = bf16 ? bf16_to_f32(h) : f16_to_f32(h);
  }
}

void check_readable(const SafeTensorInfo& t, const std::string& source) {
  if (!safetensors_dtype_readable(t.dtype))
    fail("'{}': tensor '{}' has dtype {}; aiscale reads F32, BF16 and F16: save the checkpoint "
         "in one of those (e.g. torch_dtype float32)", source, t.name, t.dtype);
}

}  // namespace

int64_t SafeTensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

bool safetensors_dtype_readable(std::string_view dtype) {
  return dtype == "F32" || dtype == "BF16" || dtype == "F16";
}

uint64_t safetensors_tensor_bytes(const SafeTensor& t) {
  return t.data.size() * (t.dtype == "F32" ? 4 : 2);
}

SafeTensorsLayout safetensors_layout(const std::vector<SafeTensorInfo>& tensors,
                                     const std::map<std::string, std::string>& metadata) {
  // An object even without tensors: a null header ("null") is not a safetensors file.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  std::vector<uint64_t> bytes;
  for (const auto& t : tensors) {
    if (!safetensors_dtype_readable(t.dtype))
      fail("internal: tensor '{}' cannot be written as {}", t.name, t.dtype);
    bytes.push_back(static_cast<uint64_t>(t.numel()) * element_bytes(t.dtype));
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes.back()}}};
    offset += bytes.back();
  }
  std::string h = header.dump();
  while ((h.size() + 8) % 8 != 0) h.push_back(' ');  // data starts 8-byte aligned
  SafeTensorsLayout out;
  const uint64_t n = h.size();
  for (int i = 0; i < 8; ++i) out.header.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  out.header += h;
  out.tensors = tensors;
  uint64_t at = out.header.size();
  for (size_t i = 0; i < tensors.size(); ++i) {
    out.tensors[i].begin = at;
    out.tensors[i].end = at += bytes[i];
  }
  out.file_bytes = at;
  return out;
}

std::string safetensors_serialize(const std::vector<SafeTensor>& tensors,
                                  const std::map<std::string, std::string>& metadata) {
  std::vector<SafeTensorInfo> infos;
  for (const auto& t : tensors) infos.push_back({t.name, t.dtype, t.shape, 0, 0});
  const SafeTensorsLayout layout = safetensors_layout(infos, metadata);
  std::string out;
  out.reserve(layout.file_bytes);
  out = layout.header;
  for (const auto& t : tensors) {
    if (t.dtype == "F32") {
      out.append(reinterpret_cast<const char*>(t.data.data()), t.data.size() * 4);
      continue;
    }
    const bool bf16 = t.dtype == "BF16";
    for (float v : t.data) {
      const uint16_t h16 = bf16 ? f32_to_bf16(v) : f32_to_f16(v);
      out.append(reinterpret_cast<const char*>(&h16), 2);
    }
  }
  return out;
}

std::map<std::string, SafeTensor> safetensors_parse(const std::string& bytes, const std::string& source) {
  if (bytes.size() < 8) fail("'{}' is not a safetensors file: too short ({} bytes)", source, bytes.size());
  const uint64_t n = header_length(reinterpret_cast<const unsigned char*>(bytes.data()));
  if (n > bytes.size() - 8 || n > kMaxHeaderBytes)
    fail("'{}' is truncated or corrupt: header of {} bytes does not fit", source, n);
  const auto infos = parse_header(std::string_view(bytes).substr(8, n), 8 + n, bytes.size(), source);
  std::map<std::string, SafeTensor> out;
  for (const auto& [name, info] : infos) {
    check_readable(info, source);
    SafeTensor t;
    t.name = name;
    t.shape = info.shape;
    t.dtype = info.dtype;
    t.data.resize(static_cast<size_t>(info.numel()));
    decode(info.dtype, bytes.data() + info.begin, t.data.size(), t.data.data());
    out.emplace(name, std::move(t));
  }
  return out;
}

SafeTensorsFile::SafeTensorsFile(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) fail("cannot read '{}': {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd_);
    fd_ = -1;
    fail("'{}' is not a regular file: give a safetensors file", path);
  }
  size_ = static_cast<uint64_t>(st.st_size);
  try {
    unsigned char first8[8];
    if (size_ < 8 || ::pread(fd_, first8, 8, 0) != 8)
      fail("'{}' is not a safetensors file: too short ({} bytes)", path, size_);
    const uint64_t n = header_length(first8);
    if (n > size_ - 8 || n > kMaxHeaderBytes)
      fail("'{}' is truncated or corrupt: header of {} bytes does not fit in the file's {} bytes",
           path, n, size_);
    std::string json(static_cast<size_t>(n), '\0');
    if (::pread(fd_, json.data(), n, 8) != static_cast<ssize_t>(n))
      fail("'{}' is truncated: its header cannot be read", path);
    tensors_ = parse_header(json, 8 + n, size_, path);
  } catch (...) {
    ::close(fd_);
    fd_ = -1;
    throw;
  }
}

SafeTensorsFile::~SafeTensorsFile() {
  if (fd_ >= 0) ::close(fd_);
}

void SafeTensorsFile::read(const SafeTensorInfo& t, float* out) const {
  read_values(t, 0, t.numel(), out);
}

void SafeTensorsFile::read_values(const SafeTensorInfo& t, int64_t first, int64_t count,
                                  float* out) const {
  check_readable(t, path_);
  AISCALE_CHECK(first >= 0 && count >= 0 && first + count <= t.numel(),
                "values [{}, {}) outside tensor '{}' of {}", first, first + count, t.name, t.numel());
  const uint64_t esize = element_bytes(t.dtype);
  const uint64_t begin = t.begin + static_cast<uint64_t>(first) * esize;
  const uint64_t bytes = static_cast<uint64_t>(count) * esize;
  // fp32 lands in place; a 16-bit tensor goes through a buffer of its own size.
  std::string buffer;
  char* dst = reinterpret_cast<char*>(out);
  if (t.dtype != "F32") {
    buffer.resize(static_cast<size_t>(bytes));
    dst = buffer.data();
  }
  uint64_t done = 0;
  while (done < bytes) {
    const ssize_t got = ::pread(fd_, dst + done, static_cast<size_t>(bytes - done),
                                static_cast<off_t>(begin + done));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0)
      fail("'{}' is truncated: tensor '{}' (bytes {}..{}) cannot be read{}", path_, t.name,
           t.begin, t.end, got < 0 ? std::string(": ") + std::strerror(errno) : std::string());
    done += static_cast<uint64_t>(got);
  }
  if (t.dtype != "F32") decode(t.dtype, buffer.data(), static_cast<uint64_t>(count), out);
}

}  // namespace aiscale::train
