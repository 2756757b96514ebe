// Grid-stride conversions between fp32 and a storage type T, one value a thread-step; the
// callers choose the grid.
#pragma once
#include <cstdint>

#include "aiscale/ops/cuda/common.cuh"

namespace aiscale::cuda {

template <typename T>
__global__ void cast_from_f32_kernel(T* out, const float* in, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    out[i] = from_f32<T>(in[i]);
}

template <typename T>
__global__ void cast_to_f32_kernel(float* out, const T* in, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    out[i] = to_f32<T>(in[i]);
}

}  // namespace aiscale::cuda
