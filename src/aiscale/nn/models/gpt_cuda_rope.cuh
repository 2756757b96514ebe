// The rotary embedding's table for the CUDA model (host code, C++17): the inverse
// frequencies of gpt_config.h's contract (theta^(-2i/D), Llama 3's scaling when
// rope_scaling.factor > 0, as Hugging Face's _compute_llama3_parameters) and the cosines and
// sines of pos * inv_freq_i for every position, computed in double and stored in fp32.
#pragma once
#include <cmath>
#include <cstdint>
#include <vector>

#include "aiscale/nn/models/gpt_config.h"

namespace aiscale::nn::detail {

// inv_freq_i for i in [0, D/2).
inline std::vector<double> gpt_cuda_rope_inv_freq(const GptConfig& c) {
  const int64_t D = c.head_size(), half = D / 2;
  const double pi = 3.14159265358979323846;
  std::vector<double> f(static_cast<size_t>(half));
  const RopeScaling& s = c.rope_scaling;
  for (int64_t i = 0; i < half; ++i) {
    double inv = std::pow(c.rope_theta, -double(2 * i) / double(D));
    if (s.enabled()) {
      const double wavelen = 2.0 * pi / inv;
      const double orig = double(s.original_context);
      const double low_wavelen = orig / s.low_freq_factor, high_wavelen = orig / s.high_freq_factor;
      if (wavelen > low_wavelen) {
        inv /= s.factor;
      } else if (wavelen >= high_wavelen) {  // the band between: interpolated
        const double smooth =
            (orig / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        inv = (1.0 - smooth) * inv / s.factor + smooth * inv;
      }
    }
    f[static_cast<size_t>(i)] = inv;
  }
  return f;
}

// (positions, D/2) cosines, then (positions, D/2) sines (cuda::rotary_apply's table).
inline std::vector<float> gpt_cuda_rope_table(const GptConfig& c, int64_t positions) {
  const std::vector<double> f = gpt_cuda_rope_inv_freq(c);
  const int64_t half = static_cast<int64_t>(f.size());
  std::vector<float> t(static_cast<size_t>(2 * positions * half));
  for (int64_t p = 0; p < positions; ++p)
    for (int64_t i = 0; i < half; ++i) {
      const double a = double(p) * f[static_cast<size_t>(i)];
      t[static_cast<size_t>(p * half + i)] = static_cast<float>(std::cos(a));
      t[static_cast<size_t>((positions + p) * half + i)] = static_cast<float>(std::sin(a));
    }
  return t;
}

}  // namespace aiscale::nn::detail
