#include "aiscale/nn/models/gpt_rope.h"

#include <cmath>

namespace aiscale::nn {

std::vector<double> rope_inv_freq(int64_t head_size, double theta, const RopeScaling& s) {
  const int64_t half = head_size / 2;
  std::vector<double> inv(static_cast<size_t>(half));
  const double pi = 3.14159265358979323846;
  const double low_wavelen = double(s.original_context) / s.low_freq_factor;
  const double high_wavelen = double(s.original_context) / s.high_freq_factor;
  for (int64_t i = 0; i < half; ++i) {
    double f = 1.0 / std::pow(theta, double(2 * i) / double(head_size));
    if (s.enabled()) {
      const double wavelen = 2.0 * pi / f;
      if (wavelen > low_wavelen) {
        f = f / s.factor;
      } else if (wavelen >= high_wavelen) {
        const double smooth = (double(s.original_context) / wavelen - s.low_freq_factor) /
                              (s.high_freq_factor - s.low_freq_factor);
        f = (1.0 - smooth) * f / s.factor + smooth * f;
      }
    }
    inv[static_cast<size_t>(i)] = f;
  }
  return inv;
}

RopeTable rope_table(const GptConfig& c, int64_t T) {
  RopeTable t;
  t.T = T;
  t.half = c.head_size() / 2;
  const std::vector<double> inv = rope_inv_freq(c);
  t.cos.resize(static_cast<size_t>(T * t.half));
  t.sin.resize(t.cos.size());
  for (int64_t p = 0; p < T; ++p)
    for (int64_t i = 0; i < t.half; ++i) {
      const double angle = double(p) * inv[static_cast<size_t>(i)];
      t.cos[static_cast<size_t>(p * t.half + i)] = static_cast<float>(std::cos(angle));
      t.sin[static_cast<size_t>(p * t.half + i)] = static_cast<float>(std::sin(angle));
    }
  return t;
}

}  // namespace aiscale::nn
