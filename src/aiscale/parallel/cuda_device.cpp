// GPU selection by node-local rank (several ranks may share a GPU: host_staged.cpp), and
// the CUDA queries of the communicators.
#include <string>
#include <vector>

#include "aiscale/core/error.h"
#include "aiscale/parallel/bootstrap.h"
#include "aiscale/parallel/launch_env.h"

#ifdef AISCALE_HAVE_CUDA
#include <cuda_profiler_api.h>

#include "aiscale/parallel/cuda_check.h"
#endif

namespace aiscale::parallel {

#ifdef AISCALE_HAVE_CUDA

bool cuda_is_device_pointer(const void* p) {
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();  // not a pointer CUDA knows: host memory
    return false;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

int cuda_visible_gpus() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

void cuda_use_gpu(int device) { cuda_check(cudaSetDevice(device), "select device"); }

std::string cuda_current_gpu_name() {
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return "";
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, dev) != cudaSuccess) return "";
  return p.name;
}

std::string cuda_current_gpu_pci_bus_id() {
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return "";
  char id[32] = {};
  if (cudaDeviceGetPCIBusId(id, sizeof id, dev) != cudaSuccess) return "";
  return id;
}

void cuda_profiler_range(bool start) {
  // A failure (no GPU yet) only means there is nothing to record.
  (void)(start ? cudaProfilerStart() : cudaProfilerStop());
}

#else  // no CUDA

bool cuda_is_device_pointer(const void*) { return false; }
int cuda_visible_gpus() { return 0; }
void cuda_use_gpu(int) { fail("this aiscale was built without CUDA: rebuild with the cuda preset"); }
std::string cuda_current_gpu_name() { return ""; }
std::string cuda_current_gpu_pci_bus_id() { return ""; }
void cuda_profiler_range(bool) {}

#endif

int cuda_select_local_gpu(int local_rank) {
#ifndef AISCALE_HAVE_CUDA
  fail("train.device = \"cuda\" but this aiscale was built without CUDA: rebuild with the cuda "
       "preset on a machine with nvcc");
#endif
  const int device = gpu_for_local_rank(local_rank, cuda_visible_gpus());
  cuda_use_gpu(device);
  return device;
}

}  // namespace aiscale::parallel
