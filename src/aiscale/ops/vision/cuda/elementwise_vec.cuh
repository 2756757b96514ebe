// Vectorised elementwise passes over NHWC tensors for the vision kernels: a thread handles
// V consecutive values of one row (V = 16 bytes of T where the channel count allows, else
// 1), so the per-channel coefficients it needs are V consecutive floats. Included by .cu
// files only.
#pragma once
#include <type_traits>

#include "aiscale/ops/cuda/common.cuh"

namespace aiscale::cuda::vision {

template <typename T, int V>
__device__ __forceinline__ void load_vec(const T* p, float* out) {
  if constexpr (V * sizeof(T) == 16) {
    const Pack<T> k = load_pack(p);
#pragma unroll
    for (int j = 0; j < V; ++j) out[j] = k.get(j);
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) out[j] = to_f32<T>(p[j]);
  }
}

template <typename T, int V>
__device__ __forceinline__ void store_vec(T* p, const float* in) {
  if constexpr (V * sizeof(T) == 16) {
    Pack<T> k;
#pragma unroll
    for (int j = 0; j < V; ++j) k.set(j, in[j]);
    store_pack(p, k);
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) p[j] = from_f32<T>(in[j]);
  }
}

// Calls launch(std::integral_constant<int, V>, grid, block) with V = 16 / sizeof(T) when
// the channel count C is a multiple of it (every row then starts on a 16-byte boundary of
// a 16-byte aligned tensor), else V = 1; `total` values in all.
template <typename T, typename F>
void launch_vec(int64_t C, int64_t total, cudaStream_t, F&& launch) {
  constexpr int kWide = int(16 / sizeof(T));
  constexpr unsigned kBlock = 256;
  auto grid_for = [&](int v) {
    const int64_t threads = ceil_div(total, v);
    return unsigned(std::max<int64_t>(1, std::min<int64_t>(ceil_div(threads, kBlock), 1 << 16)));
  };
  if (C % kWide == 0) {
    launch(std::integral_constant<int, kWide>{}, grid_for(kWide), kBlock);
  } else {
    launch(std::integral_constant<int, 1>{}, grid_for(1), kBlock);
  }
}

}  // namespace aiscale::cuda::vision
