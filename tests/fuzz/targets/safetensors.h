// safetensors (train/safetensors.h): the 8-byte length, the JSON header and the tensors it
// points at. What parses must serialise and parse again to the same tensors.
#pragma once
#include "../fuzz_support.h"
#include "aiscale/train/safetensors.h"

namespace aiscale::fuzz {

inline int fuzz_safetensors(const uint8_t* data, size_t size) {
  return expect_user_errors([&] {
    const auto tensors = train::safetensors_parse(std::string(as_text(data, size)), "fuzz.safetensors");
    std::vector<train::SafeTensor> list;
    for (const auto& [name, t] : tensors) list.push_back(t);
    std::map<std::string, train::SafeTensor> again;
    try {
      again = train::safetensors_parse(train::safetensors_serialize(list), "fuzz-written.safetensors");
    } catch (const Error& e) {
      invariant_broken(std::string("parsed tensors are refused once written back: ") + e.what());
    }
    if (again.size() != tensors.size()) invariant_broken("tensors lost when written back");
    for (const auto& [name, t] : tensors) {
      const auto it = again.find(name);
      if (it == again.end() || it->second.shape != t.shape || it->second.data.size() != t.data.size())
        invariant_broken("tensor '" + name + "' changes when written back");
    }
  });
}

}  // namespace aiscale::fuzz
