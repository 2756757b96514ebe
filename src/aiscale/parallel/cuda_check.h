// A CUDA runtime call's error as an aiscale error naming the call: for the host-side .cpp
// files of parallel/ built with CUDA (the .cu files have ops/cuda/common.cuh's macros).
#pragma once
#include <cuda_runtime.h>

#include "aiscale/core/error.h"

namespace aiscale::parallel {

inline void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail("CUDA {} failed: {}", what, cudaGetErrorString(e));
}

}  // namespace aiscale::parallel
