// GPU selection by node-local rank, and host staging of device buffers for a
// communicator that only reads host memory (MPI in a CUDA run built without NCCL, or
// parallel.communicator = "mpi" chosen on purpose).
#include <string>
#include <vector>

#include "aiscale/core/error.h"
#include "aiscale/parallel/bootstrap.h"
#include "aiscale/parallel/launch_env.h"

#ifdef AISCALE_HAVE_CUDA
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>
#endif

namespace aiscale::parallel {

#ifdef AISCALE_HAVE_CUDA
namespace {

void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail("CUDA {} failed: {}", what, cudaGetErrorString(e));
}

bool is_device_pointer(const void* p) { return cuda_is_device_pointer(p); }

class HostStaged final : public Communicator {
 public:
  explicit HostStaged(std::unique_ptr<Communicator> inner) : inner_(std::move(inner)) {}
  int rank() const override { return inner_->rank(); }
  int world() const override { return inner_->world(); }
  std::string backend() const override { return inner_->backend() + "+host-staging"; }
  void allreduce_sum(float* d, int64_t n) override {
    if (!is_device_pointer(d)) return inner_->allreduce_sum(d, n);
    float* h = stage_in(d, n);
    inner_->allreduce_sum(h, n);
    stage_out(d, h, n);
  }
  void allreduce_sum(double* d, int64_t n) override {
    if (!is_device_pointer(d)) return inner_->allreduce_sum(d, n);
    auto* h = reinterpret_cast<double*>(stage_in(d, n * 2));
    inner_->allreduce_sum(h, n);
    stage_out(d, h, n * 2);
  }
  void broadcast(float* d, int64_t n, int root) override {
    if (!is_device_pointer(d)) return inner_->broadcast(d, n, root);
    float* h = stage_in(d, n);
    inner_->broadcast(h, n, root);
    stage_out(d, h, n);
  }
  void broadcast_bytes(void* d, int64_t bytes, int root) override {
    if (!is_device_pointer(d)) return inner_->broadcast_bytes(d, bytes, root);
    const int64_t n = (bytes + 3) / 4;
    float* h = stage_in(d, n, bytes);
    inner_->broadcast_bytes(h, bytes, root);
    stage_out(d, h, n, bytes);
  }
  void barrier() override { inner_->barrier(); }
  void abort(int code) override { inner_->abort(code); }
  std::unique_ptr<Communicator> split(int color, int key) override {
    auto sub = inner_->split(color, key);
    return sub ? std::make_unique<HostStaged>(std::move(sub)) : nullptr;
  }

 private:
  // Copies n floats (or `bytes`) of device memory into the host buffer, after all work
  // queued on the device (the producer may be on any stream).
  float* stage_in(const void* d, int64_t n, int64_t bytes = -1) {
    if (bytes < 0) bytes = n * 4;
    if (static_cast<int64_t>(host_.size()) < n) host_.resize(static_cast<size_t>(n));
    cuda_check(cudaDeviceSynchronize(), "synchronize before staging");
    cuda_check(cudaMemcpy(host_.data(), d, static_cast<size_t>(bytes), cudaMemcpyDeviceToHost),
               "copy to host");
    return host_.data();
  }
  void stage_out(void* d, const void* h, int64_t n, int64_t bytes = -1) {
    if (bytes < 0) bytes = n * 4;
    cuda_check(cudaMemcpy(d, h, static_cast<size_t>(bytes), cudaMemcpyHostToDevice), "copy to device");
  }

  std::unique_ptr<Communicator> inner_;
  std::vector<float> host_;
};

}  // namespace

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

std::unique_ptr<Communicator> with_host_staging(std::unique_ptr<Communicator> inner) {
  return std::make_unique<HostStaged>(std::move(inner));
}

#else  // no CUDA

bool cuda_is_device_pointer(const void*) { return false; }
int cuda_visible_gpus() { return 0; }
void cuda_use_gpu(int) { fail("this aiscale was built without CUDA: rebuild with the cuda preset"); }
std::string cuda_current_gpu_name() { return ""; }
std::string cuda_current_gpu_pci_bus_id() { return ""; }
void cuda_profiler_range(bool) {}
std::unique_ptr<Communicator> with_host_staging(std::unique_ptr<Communicator> inner) { return inner; }

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
