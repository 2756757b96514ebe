#include "aiscale/core/dtype.h"

#include "aiscale/core/enum_names.h"
#include "aiscale/core/error.h"

namespace aiscale {

namespace {

constexpr EnumName<DType> dtype_names[] = {
    {DType::f32, "fp32"}, {DType::f32, "f32"}, {DType::f32, "float32"},
    {DType::bf16, "bf16"}, {DType::bf16, "bfloat16"},
    {DType::f16, "fp16"}, {DType::f16, "f16"}, {DType::f16, "float16"}};

}  // namespace

std::string_view dtype_name(DType t) { return enum_name(dtype_names, t); }

DType parse_dtype(std::string_view n) { return parse_enum(dtype_names, n, "precision"); }

// IEEE binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits.
uint16_t f32_to_f16(float f) {
  uint32_t u = f32_bits(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t abs = u & 0x7fffffffu;
  if (abs >= 0x7f800000u)  // Inf or NaN
    return static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
  if (abs >= 0x477ff000u)  // rounds to >= 65520: overflow to Inf
    return static_cast<uint16_t>(sign | 0x7c00u);
  if (abs < 0x38800000u) {  // below the smallest normal half (2^-14): subnormal or zero
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);  // < 2^-25 rounds to 0
    uint32_t exp = abs >> 23;
    uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - exp;  // 113 - exp + 13
    uint32_t half = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t rebias = abs - 0x38000000u;  // exponent bias 127 -> 15
  uint32_t half = rebias >> 13;
  uint32_t rem = rebias & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) ++half;
  return static_cast<uint16_t>(sign | half);
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return bits_f32(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {
    if (mant == 0) return bits_f32(sign);
    // subnormal: value = mant * 2^-24
    float v = static_cast<float>(mant) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  return bits_f32(sign | ((exp + 112) << 23) | (mant << 13));
}

}  // namespace aiscale
