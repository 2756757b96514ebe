// test_ops host cases: the FP8 formats, the op fp8_quantize and the delayed scaling of
// fp8_scale_update (ops/fp8.h), the reference the CUDA kernels are held to byte for byte.
#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <vector>

#include "aiscale/ops/fp8.h"
#include "harness.h"

namespace aiscale::ops::testing {
namespace {

constexpr Fp8Format kFormats[] = {Fp8Format::e4m3, Fp8Format::e5m2};

double pass(bool ok) { return ok ? 0.0 : 1.0; }

// Codes and values that the formats' definitions fix.
void known_codes(Outcome& outcome) {
  struct Known {
    Fp8Format f;
    float x;
    uint8_t code;
  };
  const float inf = std::numeric_limits<float>::infinity();
  const Known known[] = {
      {Fp8Format::e4m3, 1.0f, 0x38},           {Fp8Format::e4m3, -1.0f, 0xB8},
      {Fp8Format::e4m3, 448.0f, 0x7E},         {Fp8Format::e4m3, 1000.0f, 0x7E},
      {Fp8Format::e4m3, inf, 0x7E},            {Fp8Format::e4m3, -inf, 0xFE},
      {Fp8Format::e4m3, 0.0f, 0x00},           {Fp8Format::e4m3, -0.0f, 0x80},
      {Fp8Format::e4m3, std::ldexp(1.0f, -9), 0x01},   // smallest subnormal
      {Fp8Format::e4m3, std::ldexp(1.0f, -10), 0x00},  // half of it: ties to even (0)
      {Fp8Format::e4m3, std::ldexp(3.0f, -10), 0x02},  // 1.5 quanta: ties to even (2)
      {Fp8Format::e4m3, std::ldexp(1.0f, -6), 0x08},   // smallest normal
      {Fp8Format::e4m3, 1.0625f, 0x38},        // 1 + 1/16: halfway, ties to even (1)
      {Fp8Format::e4m3, 1.1875f, 0x3A},        // 1 + 3/16: halfway, ties to even (1.25)
      {Fp8Format::e4m3, 464.0f, 0x7E},         // would round to 480: saturated
      {Fp8Format::e5m2, 1.0f, 0x3C},           {Fp8Format::e5m2, 57344.0f, 0x7B},
      {Fp8Format::e5m2, 1e9f, 0x7B},           {Fp8Format::e5m2, -inf, 0xFB},
      {Fp8Format::e5m2, std::ldexp(1.0f, -16), 0x01},
      {Fp8Format::e5m2, std::ldexp(1.0f, -14), 0x04},  // smallest normal
      {Fp8Format::e5m2, 1.125f, 0x3C},         // halfway between 1 and 1.25: even (1)
  };
  for (const Known& k : known) {
    const uint8_t got = fp8_encode(k.x, k.f);
    outcome.check(fmt::format("{} encode({}) = {:#04x} (got {:#04x})", fp8_format_name(k.f),
                              double(k.x), k.code, got),
                  pass(got == k.code), 0.0);
  }
  outcome.check("e4m3 max 448, e5m2 max 57344",
                pass(fp8_max(Fp8Format::e4m3) == 448.0f && fp8_max(Fp8Format::e5m2) == 57344.0f), 0.0);
  for (Fp8Format f : kFormats) {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    outcome.check(fmt::format("{} NaN stays NaN", fp8_format_name(f)),
                  pass(std::isnan(fp8_decode(fp8_encode(nan, f), f))), 0.0);
  }
  outcome.check("e5m2 0x7C is +inf", pass(fp8_decode(0x7C, Fp8Format::e5m2) == inf), 0.0);
  outcome.check("e4m3 0x7F is NaN", pass(std::isnan(fp8_decode(0x7F, Fp8Format::e4m3))), 0.0);
}

// Every finite code decodes and encodes back to itself; every value encodes to the
// nearest finite code (ties to the even code, beyond the largest the largest).
void round_trip_and_nearest(Outcome& outcome) {
  for (Fp8Format f : kFormats) {
    std::vector<float> finite;
    std::vector<uint8_t> codes;
    int bad_round_trip = 0;
    for (int c = 0; c < 256; ++c) {
      const float v = fp8_decode(uint8_t(c), f);
      if (!std::isfinite(v)) continue;
      finite.push_back(v);
      codes.push_back(uint8_t(c));
      if (fp8_encode(v, f) != uint8_t(c)) ++bad_round_trip;
    }
    outcome.check(fmt::format("{}: {} finite codes decode and encode back", fp8_format_name(f),
                              finite.size()),
                  double(bad_round_trip), 0.0);
    Rng rng{f == Fp8Format::e4m3 ? 7u : 8u};
    const float max = fp8_max(f);
    int wrong = 0;
    for (int i = 0; i < 20000; ++i) {
      // Magnitudes spread over the whole range, subnormals and beyond the maximum.
      const float e = float(rng.uniform()) * (f == Fp8Format::e4m3 ? 20.0f : 36.0f) -
                      (f == Fp8Format::e4m3 ? 11.0f : 18.0f);
      const float x = (rng.uniform() < 0.5 ? -1.0f : 1.0f) * std::exp2(e) * 1.0f;
      const float got = fp8_decode(fp8_encode(x, f), f);
      float best = 0.0f;
      double best_err = INFINITY;
      for (size_t k = 0; k < finite.size(); ++k) {
        const double err = std::fabs(double(finite[k]) - double(x));
        const bool even = (codes[k] & 1) == 0;
        if (err < best_err || (err == best_err && even)) {
          best_err = err;
          best = finite[k];
        }
      }
      if (std::fabs(x) >= max) best = std::copysign(max, x);
      if (got != best && !(got == 0.0f && best == 0.0f)) ++wrong;
    }
    outcome.check(fmt::format("{}: 20000 values encode to the nearest code", fp8_format_name(f)),
                  double(wrong), 0.0);
  }
}

// The op fp8_quantize: both layouts, the scale, amax (NaN as +inf).
void quantize_op(Outcome& outcome) {
  const int64_t rows = 48, cols = 32;
  Rng rng{11};
  Floats x(size_t(rows * cols));
  fill_normal(x, rng, 3.0f);
  const float scale = 20.0f;
  std::vector<uint8_t> out(x.size()), out_t(x.size());
  float amax = 0.5f;
  fp8_quantize(out.data(), out_t.data(), &amax, x.data(), rows, cols, scale, Fp8Format::e4m3);
  float want_amax = 0.5f;
  int wrong = 0, wrong_t = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const float v = x[size_t(r * cols + c)];
      want_amax = std::max(want_amax, std::fabs(v));
      const uint8_t q = fp8_encode(v * scale, Fp8Format::e4m3);
      wrong += out[size_t(r * cols + c)] != q;
      wrong_t += out_t[size_t(c * rows + r)] != q;
    }
  outcome.check("fp8_quantize row-major codes", double(wrong), 0.0);
  outcome.check("fp8_quantize transposed codes", double(wrong_t), 0.0);
  outcome.check("fp8_quantize amax", std::fabs(double(amax - want_amax)), 0.0);
  x[5] = std::numeric_limits<float>::quiet_NaN();
  amax = 0.0f;
  fp8_quantize(out.data(), nullptr, &amax, x.data(), rows, cols, scale, Fp8Format::e5m2);
  outcome.check("fp8_quantize: a NaN makes amax +inf", pass(std::isinf(amax) && amax > 0), 0.0);
}

// fp8_scale_update: the history rolls, the scale follows its maximum, zeros and
// non-finite amaxes keep the previous scale, the margin halves it per step of 1.
void scale_update_op(Outcome& outcome) {
  const int64_t S = 2, H = 3;
  std::vector<float> scale(S), scale_inv(S), amax(S), history(S * H);
  const uint8_t formats[S] = {uint8_t(Fp8Format::e4m3), uint8_t(Fp8Format::e5m2)};
  Fp8ScalingArrays a{scale.data(), scale_inv.data(), amax.data(), history.data(), formats, S, H};
  fp8_scaling_reset(a);
  outcome.check("reset: scale 1", pass(scale[0] == 1.0f && scale_inv[1] == 1.0f), 0.0);
  // Step 0: amaxes 2 and 0 (slot 1 saw nothing: keeps scale 1).
  amax = {2.0f, 0.0f};
  fp8_scale_update(a, 0, 0);
  outcome.check("scale = 448 / 2", std::fabs(double(scale[0]) - 224.0), 0.0);
  outcome.check("scale_inv = 1 / scale", std::fabs(double(scale_inv[0]) - 1.0 / 224.0), 1e-9);
  outcome.check("no amax yet: scale kept", pass(scale[1] == 1.0f), 0.0);
  outcome.check("amax reset after the update", pass(amax[0] == 0.0f), 0.0);
  // Steps 1, 2: smaller amaxes; the history's maximum (2) still rules.
  amax = {1.0f, 4.0f};
  fp8_scale_update(a, 1, 0);
  outcome.check("history max rules", std::fabs(double(scale[0]) - 224.0), 0.0);
  outcome.check("e5m2 slot: 57344 / 4", std::fabs(double(scale[1]) - 14336.0), 0.0);
  amax = {0.5f, 4.0f};
  fp8_scale_update(a, 2, 0);
  // Step 3 overwrites column 0 (the 2): the maximum is now 1.
  amax = {0.25f, 4.0f};
  fp8_scale_update(a, 3, 0);
  outcome.check("the history rolls (pos mod H)", std::fabs(double(scale[0]) - 448.0), 0.0);
  // A non-finite amax keeps the scale while it is in the history.
  amax = {std::numeric_limits<float>::infinity(), 4.0f};
  fp8_scale_update(a, 4, 0);
  outcome.check("inf in the history: scale kept", std::fabs(double(scale[0]) - 448.0), 0.0);
  // Margin 2: a quarter of the scale.
  amax = {1.0f, 4.0f};
  fp8_scale_update(a, 5, 2);
  fp8_scale_update(a, 6, 2);
  fp8_scale_update(a, 7, 2);  // the inf (column 1) overwritten at pos 7
  outcome.check("margin 2: 448 / 1 / 4", std::fabs(double(scale[0]) - 112.0), 0.0);
}

}  // namespace

OpFamily fp8_family() {
  OpFamily f;
  f.name = "fp8";
  f.ops = {Op::fp8_quantize, Op::fp8_scale_update};
  f.tolerance_note = "exact: codes, nearest rounding, amax and delayed scaling";
  f.custom_test = [](const Backend&, const Backend&, Outcome& outcome) {
    known_codes(outcome);
    round_trip_and_nearest(outcome);
    quantize_op(outcome);
    scale_update_op(outcome);
  };
  return f;
}

}  // namespace aiscale::ops::testing
