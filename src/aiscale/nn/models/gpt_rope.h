// The rotary position tables of the llama family: the inverse frequencies of a head (with
// Llama 3's scaling when the config asks for it) and the cos/sin tables for positions
// [0, T). One definition for every backend: the CPU model's rope op reads these tables,
// and the CUDA model computes its angles from the same frequencies.
//
// Included by CUDA sources (C++17, no fmt).
#pragma once
#include <cstdint>
#include <vector>

#include "aiscale/nn/models/gpt_config.h"

namespace aiscale::nn {

// inv_freq_i = theta^(-2i/HS) for i in [0, HS/2), then Llama 3's scaling when
// scaling.enabled() (Hugging Face's rope_type "llama3"): with wavelen = 2 pi / inv_freq,
// wavelen > original_context / low_freq_factor -> inv_freq / factor; wavelen <
// original_context / high_freq_factor -> kept; between, smooth = (original_context / wavelen
// - low_freq_factor) / (high_freq_factor - low_freq_factor) and inv_freq becomes
// (1 - smooth) inv_freq / factor + smooth inv_freq. In double.
std::vector<double> rope_inv_freq(int64_t head_size, double theta, const RopeScaling& scaling);
inline std::vector<double> rope_inv_freq(const GptConfig& c) {
  return rope_inv_freq(c.head_size(), c.rope_theta, c.rope_scaling);
}

// cos and sin (T, HS/2) of the angles pos * inv_freq_i for pos in [0, T), row-major,
// computed in double and rounded to float.
struct RopeTable {
  int64_t T = 0, half = 0;
  std::vector<float> cos, sin;
};
RopeTable rope_table(const GptConfig& c, int64_t T);

}  // namespace aiscale::nn
