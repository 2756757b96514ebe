#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "aiscale/core/cuda_memory.h"

namespace aiscale {
namespace {
void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("CUDA error in ") + what + ": " + cudaGetErrorString(e));
}
}  // namespace

void* cuda_device_alloc(size_t bytes) {
  void* p = nullptr;
  cudaError_t e = cudaMalloc(&p, bytes);
  if (e != cudaSuccess) {
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    throw std::runtime_error("GPU out of memory: asked for " + std::to_string(bytes >> 20) +
                             " MiB, " + std::to_string(free_b >> 20) +
                             " MiB free; lower the batch size or enable recomputation");
  }
  return p;
}
void cuda_device_free(void* p) { cudaFree(p); }
void cuda_device_zero(void* p, size_t bytes) { check(cudaMemset(p, 0, bytes), "cudaMemset"); }
void cuda_copy_to_device(void* dst, const void* src, size_t bytes) {
  check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy H2D");
}
void cuda_copy_to_host(void* dst, const void* src, size_t bytes) {
  check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
}
int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}
}  // namespace aiscale
