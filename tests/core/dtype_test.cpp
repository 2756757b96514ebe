// Conversions of core/dtype.h: bf16 and fp16 round to nearest even, keep NaN/Inf,
// handle fp16 subnormals and overflow, and round-trip every 16-bit pattern.
#include "aiscale/core/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "aiscale/core/error.h"
#include "aiscale/core/rng.h"

namespace aiscale {
namespace {

float from_bits(uint32_t u) { return bits_f32(u); }
bool is_f16_nan(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x03ffu) != 0; }
bool is_bf16_nan(uint16_t h) { return (h & 0x7f80u) == 0x7f80u && (h & 0x007fu) != 0; }

// Nearest of the two candidates around x, ties to the even pattern; `to_f32` decodes
// a pattern. An independent, slow definition of round-to-nearest-even.
template <class Decode>
uint16_t nearest_even(double x, uint16_t below, uint16_t above, Decode to_f32) {
  const double d_below = std::fabs(x - double(to_f32(below)));
  const double d_above = std::fabs(double(to_f32(above)) - x);
  if (d_below < d_above) return below;
  if (d_above < d_below) return above;
  return (below & 1u) ? above : below;
}

TEST(Dtype, Names) {
  EXPECT_EQ(parse_dtype("bf16"), DType::bf16);
  EXPECT_EQ(parse_dtype("float16"), DType::f16);
  EXPECT_EQ(parse_dtype("fp32"), DType::f32);
  EXPECT_EQ(dtype_name(DType::bf16), "bf16");
  EXPECT_EQ(dtype_size(DType::f16), 2u);
  EXPECT_THROW(parse_dtype("fp8"), Error);
}

TEST(Dtype, Bf16RoundsToNearestEvenAtTies) {
  // 1.0 is 0x3f80 in bf16; 0x3f808000 lies exactly between 0x3f80 and 0x3f81.
  EXPECT_EQ(f32_to_bf16(from_bits(0x3f808000u)), 0x3f80u);  // tie -> even (down)
  EXPECT_EQ(f32_to_bf16(from_bits(0x3f818000u)), 0x3f82u);  // tie -> even (up)
  EXPECT_EQ(f32_to_bf16(from_bits(0x3f808001u)), 0x3f81u);  // just above the tie
  EXPECT_EQ(f32_to_bf16(from_bits(0x3f807fffu)), 0x3f80u);  // just below
  EXPECT_EQ(f32_to_bf16(from_bits(0xbf808000u)), 0xbf80u);  // negative tie -> even
  EXPECT_EQ(f32_to_bf16(from_bits(0xbf818000u)), 0xbf82u);
  // a carry out of the mantissa into the exponent
  EXPECT_EQ(f32_to_bf16(from_bits(0x3fffc000u)), 0x4000u);
  // the largest float is past the halfway point above bf16's largest finite value
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::max()), 0x7f80u);
  EXPECT_EQ(f32_to_bf16(from_bits(0x7f7f7fffu)), 0x7f7fu);
}

TEST(Dtype, Bf16KeepsNanInfZero) {
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::infinity()), 0x7f80u);
  EXPECT_EQ(f32_to_bf16(-std::numeric_limits<float>::infinity()), 0xff80u);
  EXPECT_TRUE(is_bf16_nan(f32_to_bf16(std::numeric_limits<float>::quiet_NaN())));
  // NaN payload only in the low 16 bits: truncation would make it Inf
  EXPECT_TRUE(is_bf16_nan(f32_to_bf16(from_bits(0x7f800001u))));
  EXPECT_TRUE(is_bf16_nan(f32_to_bf16(from_bits(0xffffffffu))));
  EXPECT_TRUE(std::isnan(bf16_to_f32(0x7fc0u)));
  EXPECT_EQ(f32_to_bf16(0.0f), 0x0000u);
  EXPECT_EQ(f32_to_bf16(-0.0f), 0x8000u);
  // subnormal floats round like any other (bf16 has float's exponent range)
  EXPECT_EQ(f32_to_bf16(from_bits(0x00008000u)), 0x0000u);  // tie -> even (0)
  EXPECT_EQ(f32_to_bf16(from_bits(0x00018000u)), 0x0002u);  // tie -> even (2)
}

TEST(Dtype, F16RoundsToNearestEvenAtTies) {
  const float ulp_at_1 = std::ldexp(1.0f, -10);
  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00u);
  EXPECT_EQ(f32_to_f16(1.0f + 0.5f * ulp_at_1), 0x3c00u);  // tie -> even (down)
  EXPECT_EQ(f32_to_f16(1.0f + 1.5f * ulp_at_1), 0x3c02u);  // tie -> even (up)
  EXPECT_EQ(f32_to_f16(std::nextafter(1.0f + 0.5f * ulp_at_1, 2.0f)), 0x3c01u);
  EXPECT_EQ(f32_to_f16(std::nextafter(1.0f + 0.5f * ulp_at_1, 0.0f)), 0x3c00u);
  EXPECT_EQ(f32_to_f16(-1.0f - 1.5f * ulp_at_1), 0xbc02u);
  EXPECT_EQ(f32_to_f16(2047.0f / 1024.0f + 0.5f * ulp_at_1), 0x4000u);  // carry into exponent
}

TEST(Dtype, F16Subnormals) {
  const float smallest = std::ldexp(1.0f, -24);  // 0x0001
  EXPECT_EQ(f16_to_f32(0x0001u), smallest);
  EXPECT_EQ(f16_to_f32(0x03ffu), 1023.0f * smallest);  // largest subnormal
  EXPECT_EQ(f16_to_f32(0x0400u), std::ldexp(1.0f, -14));  // smallest normal
  EXPECT_EQ(f16_to_f32(0x8001u), -smallest);
  EXPECT_EQ(f32_to_f16(smallest), 0x0001u);
  EXPECT_EQ(f32_to_f16(0.5f * smallest), 0x0000u);  // tie between 0 and 0x0001 -> 0
  EXPECT_EQ(f32_to_f16(std::nextafter(0.5f * smallest, 1.0f)), 0x0001u);
  EXPECT_EQ(f32_to_f16(1.5f * smallest), 0x0002u);  // tie between 1 and 2 -> 2
  EXPECT_EQ(f32_to_f16(2.5f * smallest), 0x0002u);  // tie between 2 and 3 -> 2
  EXPECT_EQ(f32_to_f16(1023.5f * smallest), 0x0400u);  // largest subnormal + half -> normal
  EXPECT_EQ(f32_to_f16(-0.5f * smallest), 0x8000u);    // signed zero
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -30)), 0x0000u);
  EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::denorm_min()), 0x0000u);
}

TEST(Dtype, F16OverflowNanInf) {
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bffu);  // largest finite
  EXPECT_EQ(f32_to_f16(65519.0f), 0x7bffu);  // below the halfway point
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00u);  // halfway: ties to even -> Inf
  EXPECT_EQ(f32_to_f16(1e6f), 0x7c00u);
  EXPECT_EQ(f32_to_f16(-1e6f), 0xfc00u);
  EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::max()), 0x7c00u);
  EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::infinity()), 0x7c00u);
  EXPECT_EQ(f32_to_f16(-std::numeric_limits<float>::infinity()), 0xfc00u);
  EXPECT_TRUE(is_f16_nan(f32_to_f16(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(is_f16_nan(f32_to_f16(from_bits(0x7f800001u))));  // payload below fp16's bits
  EXPECT_TRUE(is_f16_nan(f32_to_f16(from_bits(0xffc00000u))));
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7e00u)));
  EXPECT_TRUE(std::isinf(f16_to_f32(0x7c00u)));
  EXPECT_EQ(f16_to_f32(0x7bffu), 65504.0f);
}

// Every 16-bit pattern: decode -> encode gives the pattern back (NaN stays NaN), and
// f32 -> 16 -> f32 -> 16 is stable.
TEST(Dtype, EveryF16PatternRoundTrips) {
  for (uint32_t bits = 0; bits <= 0xffffu; ++bits) {
    const uint16_t h = uint16_t(bits);
    const float f = f16_to_f32(h);
    if (is_f16_nan(h)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << bits;
      ASSERT_TRUE(is_f16_nan(f32_to_f16(f))) << std::hex << bits;
      continue;
    }
    ASSERT_EQ(f32_to_f16(f), h) << std::hex << bits;
    const uint16_t again = f32_to_f16(f16_to_f32(f32_to_f16(f)));
    ASSERT_EQ(again, h) << std::hex << bits;
  }
}

TEST(Dtype, EveryBf16PatternRoundTrips) {
  for (uint32_t bits = 0; bits <= 0xffffu; ++bits) {
    const uint16_t h = uint16_t(bits);
    const float f = bf16_to_f32(h);
    if (is_bf16_nan(h)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << bits;
      ASSERT_TRUE(is_bf16_nan(f32_to_bf16(f))) << std::hex << bits;
      continue;
    }
    ASSERT_EQ(f32_to_bf16(f), h) << std::hex << bits;
    ASSERT_EQ(f32_to_bf16(bf16_to_f32(f32_to_bf16(f))), h) << std::hex << bits;
  }
}

// Random floats against a slow nearest-even definition: half with random bit patterns
// (every magnitude), half of fp16's range and just beyond it.
TEST(Dtype, RandomFloatsRoundToNearestEven) {
  Rng rng(42);
  for (int i = 0; i < 400000; ++i) {
    uint32_t u = uint32_t(rng.next_u64());
    if (i % 2) {  // exponent in [2^-27, 2^17): fp16's subnormals to overflow
      u = (u & 0x807fffffu) | ((100u + uint32_t(rng.below(45))) << 23);
    }
    const float f = from_bits(u);
    if (!std::isfinite(f)) continue;
    // bf16: the candidates are the truncated pattern and the next one up in magnitude
    const uint16_t truncated = uint16_t(u >> 16);
    const uint16_t want_bf16 =
        nearest_even(std::fabs(double(f)), truncated & 0x7fffu, (truncated & 0x7fffu) + 1,
                     [](uint16_t h) {  // 0x7f80 (Inf) stands for 2^128 when rounding
                       return h == 0x7f80u ? std::ldexp(1.0, 128) : double(bf16_to_f32(h));
                     }) |
        (truncated & 0x8000u);
    ASSERT_EQ(f32_to_bf16(f), want_bf16) << std::hex << u;
#ifdef __FLT16_MAX__
    // fp16: the compiler's own conversion (libgcc, round to nearest even)
    const _Float16 h = static_cast<_Float16>(f);
    uint16_t want_f16;
    std::memcpy(&want_f16, &h, 2);
    ASSERT_EQ(f32_to_f16(f), want_f16) << std::hex << u << " " << f;
#endif
  }
}

}  // namespace
}  // namespace aiscale
