#include "aiscale/train/safetensors.h"

#include <cstring>

#include <nlohmann/json.hpp>

#include "aiscale/core/dtype.h"
#include "aiscale/core/error.h"

namespace aiscale::train {

std::string safetensors_serialize(const std::vector<SafeTensor>& tensors,
                                  const std::map<std::string, std::string>& metadata) {
  // An object even without tensors: a null header ("null") is not a safetensors file.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    uint64_t bytes = t.data.size() * 4;
    header[t.name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string h = header.dump();
  while ((h.size() + 8) % 8 != 0) h.push_back(' ');  // data starts 8-byte aligned
  std::string out;
  out.reserve(8 + h.size() + offset);
  uint64_t n = h.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  out += h;
  for (const auto& t : tensors) out.append(reinterpret_cast<const char*>(t.data.data()), t.data.size() * 4);
  return out;
}

std::map<std::string, SafeTensor> safetensors_parse(const std::string& bytes, const std::string& source) {
  if (bytes.size() < 8) fail("'{}' is not a safetensors file: too short ({} bytes)", source, bytes.size());
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  if (n > bytes.size() - 8) fail("'{}' is truncated or corrupt: header of {} bytes does not fit", source, n);
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(bytes.substr(8, n));
  } catch (const nlohmann::json::exception& e) {
    fail("'{}' has a corrupt safetensors header: {}", source, e.what());
  }
  if (!header.is_object())
    fail("'{}' has a corrupt safetensors header: it is not a JSON object", source);
  const size_t data_start = 8 + n, data_size = bytes.size() - data_start;
  std::map<std::string, SafeTensor> out;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    const auto& e = it.value();
    SafeTensor t;
    t.name = it.key();
    std::string dtype;
    std::vector<uint64_t> off;
    try {  // a header of the wrong types is corrupt, not a library error
      dtype = e.at("dtype").get<std::string>();
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
    size_t elem = dtype == "F32" ? 4 : (dtype == "BF16" || dtype == "F16") ? 2 : 0;
    if (elem == 0) fail("'{}': tensor '{}' has dtype {}, aiscale reads F32, BF16 and F16", source, t.name, dtype);
    // The element count is bounded by the bytes present before anything is allocated: a
    // shape whose product overflows or exceeds the file is corrupt.
    uint64_t numel = 1;
    for (int64_t d : t.shape)
      if (__builtin_mul_overflow(numel, static_cast<uint64_t>(d), &numel) || numel > data_size)
        numel = UINT64_MAX;
    if (off.size() != 2 || off[1] < off[0] || off[1] > data_size || numel > data_size / elem ||
        off[1] - off[0] != numel * elem)
      fail("'{}' is truncated or corrupt: tensor '{}' lies outside the file", source, t.name);
    const char* p = bytes.data() + data_start + off[0];
    t.data.resize(static_cast<size_t>(numel));
    if (elem == 4) {
      std::memcpy(t.data.data(), p, static_cast<size_t>(numel) * 4);
    } else {
      for (uint64_t i = 0; i < numel; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        t.data[i] = dtype == "BF16" ? bf16_to_f32(h) : f16_to_f32(h);
      }
    }
    out.emplace(t.name, std::move(t));
  }
  return out;
}

}  // namespace aiscale::train
