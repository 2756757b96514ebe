// The shape rules of the CUDA kernels, as plain constexpr functions: the launchers
// (attention/*.cu) and the CUDA backend's supports() answer (coverage.cpp) call the same
// ones, so what supports() says is what the kernels run. No CUDA header: included by .cu
// and .cpp files alike.
#pragma once
#include <cstdint>

#include "aiscale/core/dtype.h"

namespace aiscale::cuda::coverage {

// Values of dtype t in one 16-byte pack (the vector width of the memory-bound kernels).
constexpr int64_t pack(DType t) { return 16 / int64_t(dtype_size(t)); }
constexpr bool packed(DType t, int64_t n) { return n > 0 && n % pack(t) == 0; }

// Attention: the CUDA-core kernels (`simple`) for head sizes 16, 32, 64 and 128 in every
// dtype; the tensor-core kernels (`flash`) for bf16 and fp16 at head size 64.
constexpr bool attention_head_size_ok(int64_t hs) {
  return hs == 16 || hs == 32 || hs == 64 || hs == 128;
}
constexpr int64_t kFlashHeadSize = 64;
constexpr bool attention_flash_ok(DType t, int64_t hs) {
  return (t == DType::bf16 || t == DType::f16) && hs == kFlashHeadSize;
}

// LayerNorm: C in packs; forward at most 16 packs per lane of a warp, backward at most
// 8 packs per thread over up to 4 warps per row (layernorm.cu's dispatch tables).
constexpr bool layernorm_forward_ok(DType t, int64_t C) {
  return packed(t, C) && C / pack(t) <= 16 * 32;
}
constexpr bool layernorm_backward_ok(DType t, int64_t C) {
  return packed(t, C) && C / pack(t) <= 8 * 128;
}

// FP8: the quantize kernel works on tiles of 8 x 8 values and Hopper's FP8 GEMMs take
// sizes in multiples of 16: every dimension of an FP8 linear layer (rows N, C, OC) and of
// a quantised tensor a positive multiple of 16.
constexpr bool fp8_shape_ok(int64_t rows, int64_t cols) {
  return rows > 0 && cols > 0 && rows % 16 == 0 && cols % 16 == 0;
}
// An FP8 GEMM of m x n over k (and so a linear layer of N rows, C inputs, OC outputs).
constexpr bool fp8_gemm_ok(int64_t m, int64_t n, int64_t k) {
  return fp8_shape_ok(m, n) && fp8_shape_ok(k, k);
}

}  // namespace aiscale::cuda::coverage
