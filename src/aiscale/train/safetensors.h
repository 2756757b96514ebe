// The safetensors format (Hugging Face): 8-byte little-endian header length, a JSON
// header {name: {dtype, shape, data_offsets}}, then the raw tensor bytes.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace aiscale::train {

struct SafeTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> data;  // fp32 ("F32")
};

// Serialises tensors (in the given order) with optional string metadata.
std::string safetensors_serialize(const std::vector<SafeTensor>& tensors,
                                  const std::map<std::string, std::string>& metadata = {});
// Parses a file's bytes; F32, BF16 and F16 tensors are converted to fp32. Throws Error
// naming `source` when the content is not valid safetensors.
std::map<std::string, SafeTensor> safetensors_parse(const std::string& bytes, const std::string& source);

}  // namespace aiscale::train
