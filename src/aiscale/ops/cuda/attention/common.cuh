// Causal multi-head attention, the pieces shared by the forward and backward kernels:
// PTX wrappers (cp.async, ldmatrix, mma.sync), the swizzled shared-memory tiles of the
// flash kernels and the launch wrappers. Included by the .cu files of this folder (and by
// the kernel workbench, bench/dev, which builds its variants on the same pieces); every
// definition sits in an anonymous namespace, one copy per translation unit.
//
// Kernels (one header each, launchers in forward.cu and backward.cu):
// flash: tensor-core kernels (mma.sync m16n8k16, bf16 / fp16 in, fp32 accumulate) for head
//   size 64, in the manner of FlashAttention-2. Forward (flash_forward.cuh): a block of 4
//   warps owns 128 queries (32 per warp), streams 64-key tiles of K and V through shared
//   memory (cp.async, double buffered), keeps the online-softmax state in registers and
//   writes O and the base-2 log-sum-exp. Backward (flash_backward.cuh): a block owns 128
//   keys (16 per warp, dK and dV in registers) and streams the 64-query tiles at or after
//   them; dQ is summed over key blocks with 16-byte fp32 atomics into a scratch buffer (so
//   its rounding order varies between runs), then scaled and converted.
// simple (simple.cuh): CUDA-core kernels (one thread per query or key row, fp32 math) for
//   fp32 and for head sizes 16, 32, 64, 128: the checks' path and the fallback.
// cudnn: cuDNN's fused engines, through CudnnAttention (../cudnn_attention.h).
//
// Shared-memory tiles of 64 x 64 half-precision values are stored with a 16-byte-chunk
// XOR swizzle (chunk c of row r at c ^ (r & 7)) so that ldmatrix reads and cp.async writes
// are free of bank conflicts.
#pragma once
#include <algorithm>
#include <cfloat>
#include <string>

#include "aiscale/ops/cuda/common.cuh"
#include "aiscale/ops/cuda/coverage.h"
#include "aiscale/ops/cuda/cuda_ops.cuh"

namespace aiscale::cuda {
namespace {

constexpr float kLog2e = 1.4426950408889634f;

// ---------------------------------------------------------------------------------------
// PTX wrappers

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool pred) {
  const int src_size = pred ? 16 : 0;  // 0: zero-fill the destination
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(smem)), "l"(gmem),
               "r"(src_size));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldsm_x4(uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3,
                                        const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3,
                                          const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(smem_addr(p)));
}

// dst[0..3] += v: one 16-byte atomic on sm_90, four 4-byte ones before it.
__device__ __forceinline__ void atomic_add4(float* dst, float4 v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  atomicAdd(reinterpret_cast<float4*>(dst), v);
#else
  atomicAdd(dst, v.x);
  atomicAdd(dst + 1, v.y);
  atomicAdd(dst + 2, v.z);
  atomicAdd(dst + 3, v.w);
#endif
}

// d += a b for one m16n8k16 tile (fp32 accumulate) of bf16 or fp16 inputs; pack: two
// floats rounded into the 32-bit register the inputs come in.
#define AISCALE_MMA_M16N8K16(TYPE, d, a, b0, b1)                                          \
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." TYPE "." TYPE ".f32 "             \
               "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"        \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                            \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1))
template <typename T>
struct Mma {
  static_assert(std::is_same_v<T, bf16> || std::is_same_v<T, f16>);
  static __device__ __forceinline__ void run(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                             uint32_t b1) {
    if constexpr (std::is_same_v<T, bf16>) AISCALE_MMA_M16N8K16("bf16", d, a, b0, b1);
    else AISCALE_MMA_M16N8K16("f16", d, a, b0, b1);
  }
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    using Pair = std::conditional_t<std::is_same_v<T, bf16>, __nv_bfloat162, __half2>;
    Pair v;
    if constexpr (std::is_same_v<T, bf16>) v = __floats2bfloat162_rn(lo, hi);
    else v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
};
#undef AISCALE_MMA_M16N8K16

// Zeroes a float or a (nested) array of them, unrolled: accumulators kept in registers.
__device__ __forceinline__ void zero(float& x) { x = 0.0f; }
template <typename A, size_t N>
__device__ __forceinline__ void zero(A (&a)[N]) {
#pragma unroll
  for (size_t i = 0; i < N; ++i) zero(a[i]);
}

// The block's (batch b, head h), bh = b * NH + h = blockIdx.y, and where the Q, K and V rows
// of that head start in qkv (B, T, 3C): rows `stride` = 3C apart, head h's HS columns of
// each part.
template <typename T>
struct HeadRows {
  int bh, b, h;
  int64_t stride;
  const T* q;
  const T* k;
  const T* v;
  __device__ __forceinline__ HeadRows(const T* qkv, int NH, int T_, int C, int HS)
      : bh(blockIdx.y),
        b(bh / NH),
        h(bh % NH),
        stride(3 * int64_t(C)),
        q(qkv + int64_t(b) * T_ * stride + int64_t(h) * HS),
        k(q + C),
        v(q + 2 * C) {}
};

// ---------------------------------------------------------------------------------------
// flash kernels, head size 64

constexpr int kD = 64;        // head size
constexpr int kTile = 64;     // rows of a streamed tile (K / V in forward, Q / dO in backward)
constexpr int kBlockRows = 128;  // rows a block owns (queries in forward, keys in backward)
constexpr int kWarps = 8;     // 16 of those rows each
constexpr int kThreads = kWarps * 32;
constexpr int kTileElems = kTile * kD;
constexpr int kBlockElems = kBlockRows * kD;

// Element offset of (row r, 16-byte chunk c) in a swizzled tile of 64-value rows.
__device__ __forceinline__ int swz(int r, int c) { return r * kD + ((c ^ (r & 7)) << 3); }

// Copies rows row0 .. row0 + ROWS - 1 (those < rows_valid; the others are zero-filled) of
// a 64-wide slice of a row-major matrix into a swizzled shared tile.
template <int ROWS, int THREADS = kThreads, typename T>
__device__ __forceinline__ void load_tile(T* tile, const T* base, int64_t row_stride, int row0,
                                          int rows_valid) {
#pragma unroll
  for (int idx = threadIdx.x; idx < ROWS * 8; idx += THREADS) {
    const int r = idx >> 3, c = idx & 7;
    const int row = row0 + r;
    const bool ok = row < rows_valid;
    const T* src = base + int64_t(ok ? row : 0) * row_stride + c * 8;
    cp_async16(tile + swz(r, c), src, ok);
  }
}

// ---------------------------------------------------------------------------------------
// launch wrappers

template <typename K>
void set_smem(K kernel, size_t bytes) {
  if (bytes > 48 * 1024)
    AISCALE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(bytes)));
}

template <typename F>
void dispatch_head_size(int64_t hs, F&& f) {
  switch (hs) {
    case 16: f(std::integral_constant<int, 16>{}); break;
    case 32: f(std::integral_constant<int, 32>{}); break;
    case 64: f(std::integral_constant<int, 64>{}); break;
    case 128: f(std::integral_constant<int, 128>{}); break;
    default:
      throw Error("CUDA attention supports head sizes 16, 32, 64 and 128 (got " +
                  std::to_string(hs) + "): choose n_embd / n_head among them");
  }
}

// f(tag) for the 16-bit dtypes the flash kernels take: bf16, else fp16.
template <typename F>
void dispatch_half(DType t, F&& f) {
  if (t == DType::bf16) f(bf16{});
  else f(f16{});
}

// f(tag, hs) for the simple kernels: the dtype's element type and the head size as a
// compile-time constant.
template <typename F>
void dispatch_simple(DType t, int64_t hs, F&& f) {
  dispatch_dtype(t, [&](auto tag) { dispatch_head_size(hs, [&](auto h) { f(tag, h); }); });
}

// One block for every `rows` query rows of each (batch, head).
inline dim3 row_blocks(int64_t T, int64_t rows, int64_t B, int64_t NH) {
  return dim3(static_cast<unsigned>(ceil_div(T, rows)), static_cast<unsigned>(B * NH));
}

// Whether attention_forward / attention_backward run the flash kernels for this choice.
inline bool use_flash(DType t, int64_t hs, AttentionImpl impl) {
  if (impl == AttentionImpl::cudnn)
    throw Error("internal: cuDNN attention runs through CudnnAttention, not attention_forward");
  const bool ok = coverage::attention_flash_ok(t, hs);
  if (impl != AttentionImpl::automatic && impl != AttentionImpl::simple && !ok)
    throw Error("flash attention needs bf16 or fp16 and head size 64");
  return impl != AttentionImpl::simple && ok;
}

}  // namespace
}  // namespace aiscale::cuda
