// The GPU measurements of `aiscale bench machine` (machine_gpu.cu, CUDA builds only): plain
// C++ types, so host code includes this header without CUDA's. Every function works on the
// current device (the rank's GPU) except peer_to_peer, which visits every visible GPU.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace aiscale::bench::gpu {

struct Identity {
  std::string name;        // "NVIDIA H100 80GB HBM3"
  int count = 0;           // visible GPUs
  double memory_gib = 0;   // of the current device
  std::string driver;      // CUDA driver version, "13.0"
};
Identity identity();

// A row-major GEMM: out (m, n) = op(A) (m, k) · op(B) (k, n).
struct GemmDims {
  int64_t m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
};

// Median seconds of one cuBLASLt GEMM in `precision`: "fp32" (FP32 math), "tf32" (FP32
// storage, TF32 tensor cores), "bf16" or "fp16" (16-bit inputs and output, FP32
// accumulation). Timed with CUDA events after warm-up, over `repeats` loops of enough
// calls to last a few milliseconds. Returns 0 when cuBLASLt has no algorithm for it.
double gemm_seconds(const std::string& precision, const GemmDims& d, int repeats);

// Device memory: copy (b = a) and triad (a = b + s·c) kernels, GB/s counting every byte
// read and written once (STREAM's convention), median of `repeats`.
struct DeviceBandwidth {
  double copy_gbs = 0, triad_gbs = 0;
};
DeviceBandwidth device_bandwidth(int64_t bytes_per_array, int repeats);

// cudaMemcpy of `bytes` host->device and back, from pinned (cudaMallocHost) and pageable
// (malloc'd) host memory, GB/s, median of `repeats`.
struct Transfers {
  double h2d_pinned = 0, d2h_pinned = 0, h2d_pageable = 0, d2h_pageable = 0;
};
Transfers host_device(int64_t bytes, int repeats);

// cudaMemcpyPeer of `bytes` for every ordered pair of visible GPUs, over peer access where
// the pair supports it (enabled for the measurement, then disabled again).
struct Peer {
  int src = 0, dst = 0;
  bool peer_access = false;
  double gbs = 0;
};
std::vector<Peer> peer_to_peer(int64_t bytes, int repeats);

}  // namespace aiscale::bench::gpu
