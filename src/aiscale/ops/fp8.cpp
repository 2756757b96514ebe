#include "aiscale/ops/fp8.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace aiscale::ops {
namespace {

struct Layout {
  int man_bits;
  int bias;
  uint8_t max_code;  // the largest finite magnitude's code (sign bit clear)
  uint8_t nan_code;
};

Layout layout_of(Fp8Format f) {
  return f == Fp8Format::e4m3 ? Layout{3, 7, 0x7E, 0x7F} : Layout{2, 15, 0x7B, 0x7F};
}

}  // namespace

const char* fp8_format_name(Fp8Format f) { return f == Fp8Format::e4m3 ? "e4m3" : "e5m2"; }

uint8_t fp8_encode(float x, Fp8Format f) {
  const Layout l = layout_of(f);
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  if (std::isnan(x)) return sign | l.nan_code;
  const float a = std::fabs(x);
  const float max = fp8_max(f);
  if (a >= max) return sign | l.max_code;  // saturating, +-inf included
  if (a == 0.0f) return sign;
  // The quantum at a's binade (no smaller than the subnormals'), a / quantum rounded to
  // nearest even: exact arithmetic, quantum being a power of two.
  int e = 0;
  std::frexp(a, &e);  // a = m 2^e, m in [0.5, 1): floor(log2 a) = e - 1
  const int min_exp = 1 - l.bias;
  int exp = std::max(e - 1, min_exp);
  float q = std::nearbyint(std::ldexp(a, l.man_bits - exp));
  const float one = std::ldexp(1.0f, l.man_bits);  // the implicit bit
  if (std::ldexp(q, exp - l.man_bits) > max) return sign | l.max_code;
  uint8_t exp_field, man;
  if (exp == min_exp && q < one) {  // subnormal (or rounded to zero)
    exp_field = 0;
    man = static_cast<uint8_t>(q);
  } else {
    if (q >= 2 * one) {  // rounded up into the next binade
      q /= 2;
      ++exp;
    }
    exp_field = static_cast<uint8_t>(exp + l.bias);
    man = static_cast<uint8_t>(q - one);
  }
  return sign | static_cast<uint8_t>(exp_field << l.man_bits) | man;
}

float fp8_decode(uint8_t code, Fp8Format f) {
  const Layout l = layout_of(f);
  const float sign = (code & 0x80) ? -1.0f : 1.0f;
  const int exp_bits = 7 - l.man_bits;
  const int exp_field = (code >> l.man_bits) & ((1 << exp_bits) - 1);
  const int man = code & ((1 << l.man_bits) - 1);
  if (f == Fp8Format::e4m3 && (code & 0x7F) == 0x7F) return std::numeric_limits<float>::quiet_NaN();
  if (f == Fp8Format::e5m2 && exp_field == 31)
    return man == 0 ? sign * std::numeric_limits<float>::infinity()
                    : std::numeric_limits<float>::quiet_NaN();
  if (exp_field == 0) return sign * std::ldexp(float(man), 1 - l.bias - l.man_bits);
  return sign * std::ldexp(float(man + (1 << l.man_bits)), exp_field - l.bias - l.man_bits);
}

void fp8_quantize(uint8_t* out, uint8_t* out_t, float* amax, const float* inp, int64_t rows,
                  int64_t cols, float scale, Fp8Format f) {
  float m = *amax;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const float x = inp[r * cols + c];
      const float ax = std::isnan(x) ? std::numeric_limits<float>::infinity() : std::fabs(x);
      m = std::max(m, ax);
      const uint8_t q = fp8_encode(x * scale, f);
      if (out) out[r * cols + c] = q;
      if (out_t) out_t[c * rows + r] = q;
    }
  }
  *amax = m;
}

void fp8_scale_update(const Fp8ScalingArrays& a, int64_t pos, int margin) {
  const int64_t H = a.history_len;
  for (int64_t s = 0; s < a.slots; ++s) {
    float* h = a.history + s * H;
    h[pos % H] = a.amax[s];
    a.amax[s] = 0.0f;
    float m = 0.0f;
    bool finite = true;
    for (int64_t i = 0; i < H; ++i) {
      if (!std::isfinite(h[i])) finite = false;
      m = std::max(m, h[i]);
    }
    if (!finite || !(m > 0.0f)) continue;
    const float scale = std::ldexp(fp8_max(static_cast<Fp8Format>(a.formats[s])) / m, -margin);
    if (!(scale > 0.0f) || !std::isfinite(scale)) continue;
    a.scale[s * a.scale_stride] = scale;
    a.scale_inv[s * a.scale_stride] = 1.0f / scale;
  }
}

void fp8_scaling_reset(const Fp8ScalingArrays& a) {
  for (int64_t s = 0; s < a.slots; ++s) a.scale[s * a.scale_stride] = a.scale_inv[s * a.scale_stride] = 1.0f;
  std::fill(a.amax, a.amax + a.slots, 0.0f);
  std::fill(a.history, a.history + a.slots * a.history_len, 0.0f);
}

}  // namespace aiscale::ops
