// FP8 numbers as Hopper's tensor cores take them, and the delayed scaling of FP8 training.
//
// Two formats (OCP FP8, as cuda_fp8.h names them):
//   e4m3: 4 exponent bits (bias 7), 3 mantissa bits, no infinities, largest finite 448,
//         NaN = S.1111.111; the forward pass's activations and weights.
//   e5m2: 5 exponent bits (bias 15), 2 mantissa bits, IEEE-like infinities and NaNs,
//         largest finite 57344; the backward pass's gradients (wider range).
// A value x of a tensor with scale s is stored as encode(x * s), rounded to nearest (ties
// to even) and saturated to the largest finite value (also for +-inf), NaN kept NaN: what
// the GPU's cvt.rn.satfinite does. The GEMM multiplies the stored values and dequantises
// with 1 / s of each operand (cuBLASLt's A and B scale pointers).
//
// Delayed scaling (as NVIDIA's TransformerEngine does it): each tensor keeps the largest
// |x| of its last `history` steps; the scale of the next step is
// fp8_max / max(history) / 2^margin, so a tensor is quantised with a scale computed before
// its values are known (no extra pass over them), and the amax seen while quantising feeds
// the following steps. A step whose history holds a non-finite value, or only zeros,
// keeps its previous scale.
//
// The host functions here are the reference of the CUDA kernels (ops/cuda/fp8.cu); the op
// harness (tests/ops) checks those against these byte for byte.
// Host-only header without fmt, so that .cu files may include it.
#pragma once
#include <cstdint>

namespace aiscale::ops {

enum class Fp8Format : uint8_t { e4m3, e5m2 };

// The largest finite value: 448 (e4m3), 57344 (e5m2). (constexpr: the CUDA kernels use it.)
constexpr float fp8_max(Fp8Format f) { return f == Fp8Format::e4m3 ? 448.0f : 57344.0f; }
// "e4m3" or "e5m2".
const char* fp8_format_name(Fp8Format f);

// x rounded to the format (nearest, ties to even; saturating to +-fp8_max; NaN to NaN).
uint8_t fp8_encode(float x, Fp8Format f);
// The value of a code (e4m3's NaN codes and e5m2's NaN and infinity codes included).
float fp8_decode(uint8_t code, Fp8Format f);

// The op fp8_quantize: inp (rows, cols) row-major times `scale`, encoded. `out` (rows,
// cols) and `out_t` (cols, rows: the transpose) receive the codes where non-null.
// *amax = max(*amax, max |inp|), a NaN counted as +inf (which the next update skips).
void fp8_quantize(uint8_t* out, uint8_t* out_t, float* amax, const float* inp, int64_t rows,
                  int64_t cols, float scale, Fp8Format f);

// The scaling state of `slots` tensors, each with its own format, as flat arrays (the CUDA
// model keeps the same arrays on the device): scale and scale_inv (1 / scale) of slot s
// at [s * scale_stride] (cuBLASLt reads a GEMM operand's scale_inv from a 16-byte aligned
// address: a stride of 4 on the device), amax the largest |x| seen since the last update,
// history (slots x history_len) the amaxes of the last steps.
struct Fp8ScalingArrays {
  float* scale = nullptr;
  float* scale_inv = nullptr;
  float* amax = nullptr;
  float* history = nullptr;
  const uint8_t* formats = nullptr;  // Fp8Format per slot
  int64_t slots = 0;
  int64_t history_len = 1;
  int64_t scale_stride = 1;
};

// The op fp8_scale_update, at the end of a step: each slot's amax goes to history column
// `pos` (pos = steps taken so far, modulo history_len), amax is reset to 0, and the new
// scale is fp8_max / max(history) / 2^margin (kept where that maximum is 0 or not finite),
// scale_inv its reciprocal (both rounded as IEEE float division).
void fp8_scale_update(const Fp8ScalingArrays& a, int64_t pos, int margin);

// Starting values: scale = scale_inv = 1, amax and history 0.
void fp8_scaling_reset(const Fp8ScalingArrays& a);

}  // namespace aiscale::ops
