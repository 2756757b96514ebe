// GPU measurements of `aiscale bench machine`: cuBLASLt GEMMs per precision, device copy
// and triad kernels, host<->device and peer-to-peer copies (machine_gpu.h).
#include <cublasLt.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <vector>

#include "aiscale/bench/machine_gpu.h"
#include "aiscale/ops/cuda/common.cuh"
#include "aiscale/ops/cuda/cuda_ops.cuh"

namespace aiscale::bench::gpu {
namespace {

using cuda::bf16;
using cuda::f16;

void check_lt(cublasStatus_t st, const char* what) {
  if (st != CUBLAS_STATUS_SUCCESS)
    throw Error(std::string("cuBLASLt error ") + std::to_string(int(st)) + " in " + what);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0.0 : (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]));
}

// Device memory freed on scope exit (a failed measurement leaks nothing).
struct DeviceBuffer {
  void* p = nullptr;
  explicit DeviceBuffer(size_t bytes) { AISCALE_CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(bytes, 256))); }
  ~DeviceBuffer() { if (p) cudaFree(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

struct Events {
  cudaEvent_t start = nullptr, stop = nullptr;
  Events() {
    AISCALE_CUDA_CHECK(cudaEventCreate(&start));
    AISCALE_CUDA_CHECK(cudaEventCreate(&stop));
  }
  ~Events() {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
  double seconds() const {
    float ms = 0;
    AISCALE_CUDA_CHECK(cudaEventSynchronize(stop));
    AISCALE_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    return ms * 1e-3;
  }
};

// Values in [-1, 1) from a hash of the index: no zeros or denormals to flatter the timing.
template <typename T>
__global__ void fill_kernel(T* p, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    uint32_t x = uint32_t(i) * 2654435761u ^ seed;
    x ^= x >> 15;
    x *= 2246822519u;
    x ^= x >> 13;
    p[i] = T(float(x & 0xffff) / 32768.0f - 1.0f);
  }
}

template <typename T>
void fill(void* p, int64_t n, uint32_t seed) {
  fill_kernel<T><<<1024, 256>>>(static_cast<T*>(p), n, seed);
  AISCALE_CUDA_LAUNCH_CHECK();
}

__global__ void copy_kernel(float4* __restrict__ b, const float4* __restrict__ a, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    b[i] = a[i];
}

__global__ void triad_kernel(float4* __restrict__ a, const float4* __restrict__ b,
                             const float4* __restrict__ c, float s, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float4 x = b[i], y = c[i];
    a[i] = make_float4(x.x + s * y.x, x.y + s * y.y, x.z + s * y.z, x.w + s * y.w);
  }
}

// Median seconds per call of `launch` (which enqueues one call on the default stream):
// one warm-up call, a probe for how many calls fill ~5 ms, then `repeats` timed loops.
template <typename Launch>
double time_per_call(const Launch& launch, int repeats) {
  Events ev;
  launch();
  AISCALE_CUDA_CHECK(cudaEventRecord(ev.start));
  launch();
  AISCALE_CUDA_CHECK(cudaEventRecord(ev.stop));
  const double probe = ev.seconds();
  const int iters = int(std::clamp(std::ceil(5e-3 / std::max(probe, 1e-7)), 1.0, 500.0));
  std::vector<double> t;
  for (int r = 0; r < std::max(1, repeats); ++r) {
    AISCALE_CUDA_CHECK(cudaEventRecord(ev.start));
    for (int i = 0; i < iters; ++i) launch();
    AISCALE_CUDA_CHECK(cudaEventRecord(ev.stop));
    t.push_back(ev.seconds() / iters);
  }
  return median(t);
}

int launch_blocks() {
  int dev = 0, sms = 0;
  AISCALE_CUDA_CHECK(cudaGetDevice(&dev));
  AISCALE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  return sms * 8;
}

}  // namespace

Identity identity() {
  Identity id;
  int dev = 0, driver = 0;
  AISCALE_CUDA_CHECK(cudaGetDeviceCount(&id.count));
  AISCALE_CUDA_CHECK(cudaGetDevice(&dev));
  cudaDeviceProp prop{};
  AISCALE_CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
  id.name = prop.name;
  id.memory_gib = double(prop.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0);
  AISCALE_CUDA_CHECK(cudaDriverGetVersion(&driver));
  id.driver = std::to_string(driver / 1000) + "." + std::to_string((driver % 1000) / 10);
  return id;
}

double gemm_seconds(const std::string& precision, const GemmDims& d, int repeats) {
  const bool half = precision == "bf16" || precision == "fp16";
  if (!half && precision != "fp32" && precision != "tf32")
    throw Error("unknown GEMM precision '" + precision + "': use fp32, tf32, bf16 or fp16");
  const cudaDataType_t type = precision == "bf16" ? CUDA_R_16BF : precision == "fp16" ? CUDA_R_16F : CUDA_R_32F;
  const cublasComputeType_t compute =
      precision == "tf32" ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  const size_t elem = half ? 2 : 4;
  DeviceBuffer a(size_t(d.m * d.k) * elem), b(size_t(d.k * d.n) * elem), out(size_t(d.m * d.n) * elem);
  DeviceBuffer workspace(cuda::Gemm::kWorkspaceBytes);
  if (precision == "bf16") { fill<bf16>(a.p, d.m * d.k, 1); fill<bf16>(b.p, d.k * d.n, 2); }
  else if (precision == "fp16") { fill<f16>(a.p, d.m * d.k, 1); fill<f16>(b.p, d.k * d.n, 2); }
  else { fill<float>(a.p, d.m * d.k, 1); fill<float>(b.p, d.k * d.n, 2); }

  // Row-major out (m, n) = op(A) op(B) is column-major out^T (n, m) = op(B)^T op(A)^T: the
  // column-major call's first operand is B, its second A.
  const cublasOperation_t op_x = d.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_y = d.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int64_t x_rows = d.trans_b ? d.k : d.n, x_cols = d.trans_b ? d.n : d.k;
  const int64_t y_rows = d.trans_a ? d.m : d.k, y_cols = d.trans_a ? d.k : d.m;

  cublasLtHandle_t handle = nullptr;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t lx = nullptr, ly = nullptr, ld = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  auto release = [&] {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (ld) cublasLtMatrixLayoutDestroy(ld);
    if (ly) cublasLtMatrixLayoutDestroy(ly);
    if (lx) cublasLtMatrixLayoutDestroy(lx);
    if (desc) cublasLtMatmulDescDestroy(desc);
    if (handle) cublasLtDestroy(handle);
  };
  try {
    check_lt(cublasLtCreate(&handle), "Create");
    check_lt(cublasLtMatmulDescCreate(&desc, compute, CUDA_R_32F), "MatmulDescCreate");
    check_lt(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_x, sizeof(op_x)), "TRANSA");
    check_lt(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_y, sizeof(op_y)), "TRANSB");
    check_lt(cublasLtMatrixLayoutCreate(&lx, type, x_rows, x_cols, x_rows), "layout B");
    check_lt(cublasLtMatrixLayoutCreate(&ly, type, y_rows, y_cols, y_rows), "layout A");
    check_lt(cublasLtMatrixLayoutCreate(&ld, type, d.n, d.m, d.n), "layout D");
    check_lt(cublasLtMatmulPreferenceCreate(&pref), "PreferenceCreate");
    const uint64_t ws = cuda::Gemm::kWorkspaceBytes;
    check_lt(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                                  sizeof(ws)), "workspace");
    cublasLtMatmulHeuristicResult_t result{};
    int count = 0;
    if (cublasLtMatmulAlgoGetHeuristic(handle, desc, lx, ly, ld, ld, pref, 1, &result, &count) !=
            CUBLAS_STATUS_SUCCESS || count == 0) {
      release();
      return 0.0;
    }
    const float alpha = 1.0f, beta = 0.0f;
    const double s = time_per_call([&] {
      check_lt(cublasLtMatmul(handle, desc, &alpha, b.p, lx, a.p, ly, &beta, out.p, ld, out.p, ld,
                              &result.algo, workspace.p, ws, 0), "Matmul");
    }, repeats);
    release();
    return s;
  } catch (...) {
    release();
    throw;
  }
}

DeviceBandwidth device_bandwidth(int64_t bytes_per_array, int repeats) {
  const int64_t n4 = std::max<int64_t>(1, bytes_per_array / 16);
  const size_t bytes = size_t(n4) * 16;
  DeviceBuffer a(bytes), b(bytes), c(bytes);
  fill<float>(a.p, n4 * 4, 1);
  fill<float>(b.p, n4 * 4, 2);
  fill<float>(c.p, n4 * 4, 3);
  const int blocks = launch_blocks();
  DeviceBandwidth bw;
  const double copy_s = time_per_call([&] {
    copy_kernel<<<blocks, 256>>>(static_cast<float4*>(b.p), static_cast<const float4*>(a.p), n4);
  }, repeats);
  AISCALE_CUDA_LAUNCH_CHECK();
  const double triad_s = time_per_call([&] {
    triad_kernel<<<blocks, 256>>>(static_cast<float4*>(a.p), static_cast<const float4*>(b.p),
                                  static_cast<const float4*>(c.p), 0.5f, n4);
  }, repeats);
  AISCALE_CUDA_LAUNCH_CHECK();
  AISCALE_CUDA_CHECK(cudaDeviceSynchronize());
  bw.copy_gbs = 2.0 * double(bytes) / copy_s / 1e9;
  bw.triad_gbs = 3.0 * double(bytes) / triad_s / 1e9;
  return bw;
}

Transfers host_device(int64_t bytes, int repeats) {
  const size_t n = size_t(std::max<int64_t>(bytes, 1));
  DeviceBuffer dev(n);
  void* pinned = nullptr;
  AISCALE_CUDA_CHECK(cudaMallocHost(&pinned, n));
  std::vector<char> pageable(n, 1);  // touched: its pages exist before the copies
  auto gbs = [&](void* dst, const void* src, cudaMemcpyKind kind) {
    std::vector<double> t;
    for (int r = 0; r < std::max(1, repeats) + 1; ++r) {  // the first is a warm-up
      const auto t0 = std::chrono::steady_clock::now();
      AISCALE_CUDA_CHECK(cudaMemcpy(dst, src, n, kind));
      AISCALE_CUDA_CHECK(cudaDeviceSynchronize());
      const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
      if (r > 0) t.push_back(dt.count());
    }
    return double(n) / median(t) / 1e9;
  };
  Transfers x;
  try {
    std::fill(static_cast<char*>(pinned), static_cast<char*>(pinned) + n, 1);
    x.h2d_pinned = gbs(dev.p, pinned, cudaMemcpyHostToDevice);
    x.d2h_pinned = gbs(pinned, dev.p, cudaMemcpyDeviceToHost);
    x.h2d_pageable = gbs(dev.p, pageable.data(), cudaMemcpyHostToDevice);
    x.d2h_pageable = gbs(pageable.data(), dev.p, cudaMemcpyDeviceToHost);
  } catch (...) {
    cudaFreeHost(pinned);
    throw;
  }
  cudaFreeHost(pinned);
  return x;
}

std::vector<Peer> peer_to_peer(int64_t bytes, int repeats) {
  int count = 0, home = 0;
  AISCALE_CUDA_CHECK(cudaGetDeviceCount(&count));
  AISCALE_CUDA_CHECK(cudaGetDevice(&home));
  std::vector<Peer> out;
  if (count < 2) return out;
  const size_t n = size_t(std::max<int64_t>(bytes, 1));
  std::vector<void*> buf(size_t(count), nullptr);
  auto free_all = [&] {
    for (int g = 0; g < count; ++g)
      if (buf[size_t(g)]) {
        cudaSetDevice(g);
        cudaFree(buf[size_t(g)]);
      }
    cudaSetDevice(home);
  };
  try {
    for (int g = 0; g < count; ++g) {
      AISCALE_CUDA_CHECK(cudaSetDevice(g));
      AISCALE_CUDA_CHECK(cudaMalloc(&buf[size_t(g)], n));
    }
    for (int src = 0; src < count; ++src)
      for (int dst = 0; dst < count; ++dst) {
        if (src == dst) continue;
        Peer p{src, dst, false, 0};
        int can = 0;
        AISCALE_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, src, dst));
        AISCALE_CUDA_CHECK(cudaSetDevice(src));
        bool enabled_here = false;
        if (can) {
          const cudaError_t e = cudaDeviceEnablePeerAccess(dst, 0);
          if (e == cudaSuccess) enabled_here = true;
          else if (e == cudaErrorPeerAccessAlreadyEnabled) (void)cudaGetLastError();
          else AISCALE_CUDA_CHECK(e);
          p.peer_access = true;
        }
        const double s = time_per_call([&] {
          AISCALE_CUDA_CHECK(cudaMemcpyPeerAsync(buf[size_t(dst)], dst, buf[size_t(src)], src, n, 0));
        }, repeats);
        p.gbs = double(n) / s / 1e9;
        if (enabled_here) AISCALE_CUDA_CHECK(cudaDeviceDisablePeerAccess(dst));
        out.push_back(p);
      }
  } catch (...) {
    free_all();
    throw;
  }
  free_all();
  return out;
}

}  // namespace aiscale::bench::gpu
