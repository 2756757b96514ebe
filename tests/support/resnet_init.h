// Deterministic ResNet initialisations computed the same way by aiscale's tests and by
// bench/compare/torch_resnet_fixture.py: rule 1 (sinusoid) makes every weight matrix rank
// 2 and the network ill-conditioned (docs/guide/vision.md, "Why ResNet-18 needs the hashed
// initialisation"); rule 2 (hashed, exact in int64) is full rank.
#pragma once
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "aiscale/nn/models/resnet.h"

namespace aiscale::testsupport {

inline double sinusoid_u(int64_t i, int64_t k) {
  return std::sin(0.7548776662 * double(i + 1) + 1.3247179572 * double(k + 1));
}

// Uniform in (-1, 1), from the element index i and the tensor index k.
inline double hashed_u(int64_t i, int64_t k) {
  const int64_t p = 2147483647;  // 2^31 - 1: every product below stays under 2^63
  int64_t h = ((i + 1) * 2654435761LL + (k + 1) * 1013904223LL) % p;
  h = h * h % p;
  h = h * h % p;
  return double(2 * h + 1) / double(p) - 1.0;
}

// Convolutions He (fan-out) scaled, the classifier 1/sqrt(features) (bias halved), batch
// norm scales 1 + 0.2 u and shifts 0.2 u.
inline void deterministic_init(nn::ResNet& m, int rule) {
  if (rule != 1 && rule != 2)
    throw std::invalid_argument("initialisation rule " + std::to_string(rule));
  const double amplitude = rule == 1 ? std::sqrt(2.0) : std::sqrt(3.0);  // u's rms -> 1
  const auto& tensors = m.parameter_tensors();
  for (size_t k = 0; k < tensors.size(); ++k) {
    const nn::ResNetTensor& t = tensors[k];
    float* p = m.params().data() + t.offset;
    const bool fc = t.name.rfind("fc.", 0) == 0;
    const bool weight = t.name.size() > 6 && t.name.compare(t.name.size() - 6, 6, "weight") == 0;
    for (int64_t i = 0; i < t.size; ++i) {
      const double u = rule == 1 ? sinusoid_u(i, int64_t(k)) : hashed_u(i, int64_t(k));
      double v;
      if (t.shape.size() == 4) {
        v = u * amplitude * std::sqrt(2.0 / double(t.shape[0] * t.shape[2] * t.shape[3]));
      } else if (fc) {
        v = u / std::sqrt(double(m.config().features())) * (weight ? 1.0 : 0.5);
      } else {
        v = weight ? 1.0 + 0.2 * u : 0.2 * u;
      }
      p[i] = float(v);
    }
  }
}

}  // namespace aiscale::testsupport
