// Shared device functions for the CUDA ops: error checks, the three element types
// (fp32, bf16, fp16) behind one set of conversions, 16-byte vector packs and warp / block
// reductions. Included by .cu files only.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "aiscale/core/dtype.h"

namespace aiscale {
// aiscale::Error, token for token as in aiscale/core/error.h. That header pulls in fmt,
// which nvcc (C++20 mode, g++ 12/13 as host compiler) cannot compile, so .cu files never
// include it; an identical definition keeps one type (one typeinfo) across the program.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};
}  // namespace aiscale

namespace aiscale::cuda {

using bf16 = __nv_bfloat16;
using f16 = __half;

[[noreturn]] inline void throw_cuda_error(cudaError_t e, const char* what, const char* file,
                                          int line) {
  throw Error(std::string("CUDA error: ") + cudaGetErrorString(e) + " in " + what + " at " +
              file + ":" + std::to_string(line));
}

#define AISCALE_CUDA_CHECK(expr)                                                          \
  do {                                                                                    \
    cudaError_t aiscale_cuda_err_ = (expr);                                               \
    if (aiscale_cuda_err_ != cudaSuccess)                                                 \
      ::aiscale::cuda::throw_cuda_error(aiscale_cuda_err_, #expr, __FILE__, __LINE__);    \
  } while (0)

// After a kernel launch: catches bad launch configurations at once (asynchronous faults
// surface at the next synchronising call).
#define AISCALE_CUDA_LAUNCH_CHECK() AISCALE_CUDA_CHECK(cudaGetLastError())

// Name of a dtype (local, so that aiscale_cuda needs no symbol of aiscale_lib).
inline const char* dtype_str(DType t) {
  return t == DType::f32 ? "fp32" : t == DType::bf16 ? "bf16" : "fp16";
}

// Internal invariant check for .cu files. (AISCALE_CHECK formats with fmt, whose
// compile-time format strings nvcc rejects in C++20 mode.)
#define AISCALE_CUDA_REQUIRE(cond, message)                                                \
  do {                                                                                     \
    if (!(cond))                                                                           \
      throw ::aiscale::Error(std::string("internal check failed: ") + #cond + ": " +       \
                             std::string(message));                                        \
  } while (0)

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// ---------------------------------------------------------------------------------------
// Element conversions. Math is always fp32; storage is T.

// T is float, bf16 or fp16; back to T rounds to nearest even (the conversion operators of
// cuda_bf16.h and cuda_fp16.h: __bfloat162float / __float2bfloat16_rn and the fp16 pair).
template <typename T>
__device__ __forceinline__ float to_f32(T x) {
  return static_cast<float>(x);
}
template <typename T>
__device__ __forceinline__ T from_f32(float x) {
  return static_cast<T>(x);
}

// 16 bytes of T: the unit of every vectorised load and store.
template <typename T>
struct alignas(16) Pack {
  static constexpr int N = 16 / static_cast<int>(sizeof(T));
  T v[N];
  __device__ __forceinline__ float get(int i) const { return to_f32<T>(v[i]); }
  __device__ __forceinline__ void set(int i, float x) { v[i] = from_f32<T>(x); }
};

template <typename T>
__device__ __forceinline__ Pack<T> load_pack(const T* p) {
  Pack<T> r;
  *reinterpret_cast<int4*>(&r) = *reinterpret_cast<const int4*>(p);
  return r;
}
// Streaming load (read once, do not keep in L1/L2 preferentially).
template <typename T>
__device__ __forceinline__ Pack<T> load_pack_cs(const T* p) {
  Pack<T> r;
  *reinterpret_cast<int4*>(&r) = __ldcs(reinterpret_cast<const int4*>(p));
  return r;
}
template <typename T>
__device__ __forceinline__ void store_pack(T* p, const Pack<T>& x) {
  *reinterpret_cast<int4*>(p) = *reinterpret_cast<const int4*>(&x);
}
template <typename T>
__device__ __forceinline__ void store_pack_cs(T* p, const Pack<T>& x) {
  __stcs(reinterpret_cast<int4*>(p), *reinterpret_cast<const int4*>(&x));
}

// use(i, load(i)) for i = first, first + stride, ... below end, U loads issued before any
// of their values is used (U loads in flight per thread). I: int or int64_t.
template <int U, typename I, typename Load, typename Use>
__device__ __forceinline__ void strided_loads(I first, I end, I stride, Load&& load, Use&& use) {
  using V = decltype(load(first));
  for (I i0 = first; i0 < end; i0 += stride * U) {
    V v[U];
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (i0 + u * stride < end) v[u] = load(i0 + u * stride);
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (i0 + u * stride < end) use(i0 + u * stride, v[u]);
  }
}

// ---------------------------------------------------------------------------------------
// Reductions

template <typename T>  // float or double
__device__ __forceinline__ T warp_sum(T x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}
__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the
// result. `scratch` holds 32 floats of shared memory; callable repeatedly.
template <typename T>  // float or double
__device__ __forceinline__ T block_sum(T x, T* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
  x = warp_sum(x);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = x;
  __syncthreads();
  x = lane < nwarps ? scratch[lane] : T(0);
  return warp_sum(x);
}
__device__ __forceinline__ float block_max(float x, float* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
  x = warp_max(x);
  __syncthreads();
  if (lane == 0) scratch[warp] = x;
  __syncthreads();
  x = lane < nwarps ? scratch[lane] : -INFINITY;
  return warp_max(x);
}

// A kernel's argument from an op's: a buffer as the element type X (const kept), any
// other argument as it is.
template <typename X>
X* typed(void* p) { return static_cast<X*>(p); }
template <typename X>
const X* typed(const void* p) { return static_cast<const X*>(p); }
template <typename X, typename A, typename = std::enable_if_t<std::is_arithmetic_v<A>>>
A typed(A a) { return a; }

// Dispatch a DType to the element type: f(float{}), f(bf16{}), f(f16{}).
template <typename F>
void dispatch_dtype(DType t, F&& f) {
  switch (t) {
    case DType::f32: f(float{}); break;
    case DType::bf16: f(bf16{}); break;
    case DType::f16: f(f16{}); break;
  }
}

}  // namespace aiscale::cuda
