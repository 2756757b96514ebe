// Host-callable wrappers around device memory (implemented in cuda_memory.cu), so that
// host-only .cpp files never include CUDA headers.
#pragma once
#include <cstddef>

namespace aiscale {
void* cuda_device_alloc(size_t bytes);
void cuda_device_free(void* p);
void cuda_device_zero(void* p, size_t bytes);
void cuda_copy_to_device(void* dst, const void* src, size_t bytes);
void cuda_copy_to_host(void* dst, const void* src, size_t bytes);
int cuda_device_count();  // 0 when there is no usable GPU (no throw)
}  // namespace aiscale
