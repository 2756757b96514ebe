// Decoded images of one size held in memory: what IDX files hold and what the in-memory
// source (memory_source.h) serves from.
#pragma once
#include <cstdint>
#include <vector>

namespace aiscale::data {

struct ImageArray {
  int64_t count = 0, height = 0, width = 0, channels = 1;
  std::vector<uint8_t> pixels;  // (N, H, W, C), 0..255
  std::vector<int32_t> labels;  // (N)
};

}  // namespace aiscale::data
