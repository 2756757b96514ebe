// Helpers of the GPU vision checks: device buffers of fp32 / bf16 / fp16 filled from and
// read back to host floats, layout permutations, and error measures.
#pragma once
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "aiscale/core/dtype.h"
#include "aiscale/core/rng.h"

namespace aiscale::gpu_vision {

class DeviceBuffer {
 public:
  DeviceBuffer(DType t, size_t n) : t_(t), n_(n) {
    EXPECT_EQ(cudaMalloc(&p_, std::max<size_t>(n, 1) * dtype_size(t)), cudaSuccess);
    cudaMemset(p_, 0, std::max<size_t>(n, 1) * dtype_size(t));
  }
  DeviceBuffer(DType t, const std::vector<float>& host) : DeviceBuffer(t, host.size()) {
    upload(host);
  }
  ~DeviceBuffer() { cudaFree(p_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return p_; }
  float* f32() const { return static_cast<float*>(p_); }
  void upload(const std::vector<float>& host) {
    std::vector<uint16_t> half(host.size());
    const void* src = host.data();
    if (t_ != DType::f32) {
      for (size_t i = 0; i < host.size(); ++i)
        half[i] = t_ == DType::bf16 ? f32_to_bf16(host[i]) : f32_to_f16(host[i]);
      src = half.data();
    }
    EXPECT_EQ(cudaMemcpy(p_, src, host.size() * dtype_size(t_), cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  std::vector<float> download() const {
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<float> out(n_);
    if (t_ == DType::f32) {
      cudaMemcpy(out.data(), p_, n_ * 4, cudaMemcpyDeviceToHost);
      return out;
    }
    std::vector<uint16_t> half(n_);
    cudaMemcpy(half.data(), p_, n_ * 2, cudaMemcpyDeviceToHost);
    for (size_t i = 0; i < n_; ++i)
      out[i] = t_ == DType::bf16 ? bf16_to_f32(half[i]) : f16_to_f32(half[i]);
    return out;
  }

 private:
  DType t_;
  size_t n_;
  void* p_ = nullptr;
};

// Values rounded through t (what the device sees of a host array).
inline std::vector<float> rounded(DType t, std::vector<float> v) {
  if (t == DType::f32) return v;
  for (float& x : v) x = t == DType::bf16 ? bf16_to_f32(f32_to_bf16(x)) : f16_to_f32(f32_to_f16(x));
  return v;
}

inline std::vector<float> random_vector(Rng& rng, size_t n, float scale = 1.0f) {
  std::vector<float> v(n);
  for (float& x : v) x = rng.normal() * scale;
  return v;
}

// (N, C, HW) <-> (N, HW, C)
inline std::vector<float> to_nhwc(const std::vector<float>& x, int64_t N, int64_t C, int64_t HW) {
  std::vector<float> y(x.size());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t p = 0; p < HW; ++p) y[(n * HW + p) * C + c] = x[(n * C + c) * HW + p];
  return y;
}
inline std::vector<float> to_nchw(const std::vector<float>& y, int64_t N, int64_t C, int64_t HW) {
  std::vector<float> x(y.size());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t p = 0; p < HW; ++p) x[(n * C + c) * HW + p] = y[(n * HW + p) * C + c];
  return x;
}

// ||a - b|| / max(||b||, tiny): the relative L2 error.
inline double relative_error(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    num += double(a[i] - b[i]) * double(a[i] - b[i]);
    den += double(b[i]) * double(b[i]);
  }
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
}

inline double tolerance(DType t) { return t == DType::f32 ? 2e-5 : 2e-2; }

}  // namespace aiscale::gpu_vision
