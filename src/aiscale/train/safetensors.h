// The safetensors format (Hugging Face): 8-byte little-endian header length, a JSON
// header {name: {dtype, shape, data_offsets}} (offsets relative to the end of the header),
// then the raw tensor bytes.
//
// Reading checks everything a byte count or an allocation is taken from before it is
// used: the header's length against the file's size, every tensor's offsets against the
// bytes present, its shape's product against its byte range. A file is read tensor by
// tensor (SafeTensorsFile), so that a checkpoint larger than memory's spare room is never
// read whole and tensors that are not wanted are never decoded.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "aiscale/core/non_copyable.h"

namespace aiscale::train {

// A tensor in memory: fp32 values, written as `dtype` ("F32", "BF16" or "F16").
struct SafeTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> data;
  std::string dtype = "F32";  // as written; as read from a file, the file's dtype
};

// One tensor of a header: its dtype as the file names it, its shape and its bytes
// [begin, end) counted from the start of the file (checked to lie inside it).
struct SafeTensorInfo {
  std::string name, dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;
  int64_t numel() const;
};

// Whether aiscale reads a dtype (converted to fp32): F32, BF16, F16.
bool safetensors_dtype_readable(std::string_view dtype);

// A file's header for tensors of these names, dtypes and shapes (their begin and end are
// ignored): the bytes before the data (length, JSON, padding), the tensors with their byte
// ranges [begin, end) counted from the start of the file, and the file's size. What
// safetensors_serialize writes, without the data: a streamed writer fills the ranges.
struct SafeTensorsLayout {
  std::string header;
  std::vector<SafeTensorInfo> tensors;
  uint64_t file_bytes = 0;
};
SafeTensorsLayout safetensors_layout(const std::vector<SafeTensorInfo>& tensors,
                                     const std::map<std::string, std::string>& metadata = {});

// Serialises tensors (in the given order) with optional string metadata. Each tensor is
// written in its `dtype` (F32, BF16 or F16; rounded to nearest even).
std::string safetensors_serialize(const std::vector<SafeTensor>& tensors,
                                  const std::map<std::string, std::string>& metadata = {});
// Bytes safetensors_serialize would write for tensors of these dtypes and sizes (for
// splitting a model into files of a size limit).
uint64_t safetensors_tensor_bytes(const SafeTensor& t);
// Parses a whole file's bytes; F32, BF16 and F16 tensors are converted to fp32, others
// refused by name. Throws Error naming `source` when the content is not valid safetensors.
std::map<std::string, SafeTensor> safetensors_parse(const std::string& bytes, const std::string& source);

// A safetensors file on disk, its header read and checked when opened; tensors are read one
// at a time. Errors name the file (and the tensor).
class SafeTensorsFile : NonCopyable {
 public:
  explicit SafeTensorsFile(const std::string& path);
  ~SafeTensorsFile();

  const std::string& path() const { return path_; }
  const std::map<std::string, SafeTensorInfo>& tensors() const { return tensors_; }
  // Reads `t` (a tensor of this file) into `out` (t.numel() values), converted to fp32.
  // Another dtype is refused by name; bytes that are no longer there (the file was cut
  // after it was opened) are reported naming the file and the tensor.
  void read(const SafeTensorInfo& t, float* out) const;
  // Values [first, first + count) of `t` (row-major), converted to fp32.
  void read_values(const SafeTensorInfo& t, int64_t first, int64_t count, float* out) const;

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
  std::map<std::string, SafeTensorInfo> tensors_;
};

}  // namespace aiscale::train
