// Device-side functions of the op harness's CUDA cases (tests/ops/cuda) and of the kernel
// workbench (bench/dev): device buffers that convert from / to fp32 host vectors, random
// inputs rounded to a dtype, relative errors and a CUDA-event timer.
#pragma once
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <algorithm>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "aiscale/core/dtype.h"

namespace aiscale::dev {

inline void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("CUDA error in ") + what + ": " + cudaGetErrorString(e));
}

// Round a value through dtype t (what the device will see).
inline float round_to(DType t, float x) {
  if (t == DType::bf16) return bf16_to_f32(f32_to_bf16(x));
  if (t == DType::f16) return f16_to_f32(f32_to_f16(x));
  return x;
}
inline void round_all(DType t, std::vector<float>& v) {
  for (float& x : v) x = round_to(t, x);
}

// A device buffer of n values of dtype t (or raw bytes for ints / fp32 state).
class Buffer {
 public:
  Buffer() = default;
  Buffer(DType t, size_t n) : t_(t), n_(n) {
    check_cuda(cudaMalloc(&p_, n * dtype_size(t) + 16), "cudaMalloc");
    poison();
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Buffer(Buffer&& o) noexcept { *this = std::move(o); }
  Buffer& operator=(Buffer&& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(t_, o.t_);
    std::swap(n_, o.n_);
    return *this;
  }
  ~Buffer() {
    if (p_) cudaFree(p_);
  }
  void* get() const { return p_; }
  float* f() const { return static_cast<float*>(p_); }
  size_t size() const { return n_; }
  // NaN everywhere: an element the kernel forgot to write shows up in the check.
  void poison() { check_cuda(cudaMemset(p_, 0xff, n_ * dtype_size(t_)), "cudaMemset"); }
  void zero() { check_cuda(cudaMemset(p_, 0, n_ * dtype_size(t_)), "cudaMemset"); }
  void upload(const std::vector<float>& v) {
    if (v.size() != n_) throw std::runtime_error("upload: size mismatch");
    if (t_ == DType::f32) {
      check_cuda(cudaMemcpy(p_, v.data(), n_ * 4, cudaMemcpyHostToDevice), "H2D");
      return;
    }
    std::vector<uint16_t> h(n_);
    for (size_t i = 0; i < n_; ++i) h[i] = t_ == DType::bf16 ? f32_to_bf16(v[i]) : f32_to_f16(v[i]);
    check_cuda(cudaMemcpy(p_, h.data(), n_ * 2, cudaMemcpyHostToDevice), "H2D");
  }
  std::vector<float> download() const {
    std::vector<float> v(n_);
    check_cuda(cudaDeviceSynchronize(), "kernel");
    if (t_ == DType::f32) {
      check_cuda(cudaMemcpy(v.data(), p_, n_ * 4, cudaMemcpyDeviceToHost), "D2H");
      return v;
    }
    std::vector<uint16_t> h(n_);
    check_cuda(cudaMemcpy(h.data(), p_, n_ * 2, cudaMemcpyDeviceToHost), "D2H");
    for (size_t i = 0; i < n_; ++i) v[i] = t_ == DType::bf16 ? bf16_to_f32(h[i]) : f16_to_f32(h[i]);
    return v;
  }
  void upload_raw(const void* src, size_t bytes) {
    check_cuda(cudaMemcpy(p_, src, bytes, cudaMemcpyHostToDevice), "H2D");
  }

 private:
  void* p_ = nullptr;
  DType t_ = DType::f32;
  size_t n_ = 0;
};

inline std::vector<float> randn(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// ||a - b|| / ||b||; NaN or Inf anywhere gives infinity.
inline double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) return INFINITY;
    const double d = double(a[i]) - double(b[i]);
    num += d * d;
    den += double(b[i]) * double(b[i]);
  }
  if (den == 0.0) return num == 0.0 ? 0.0 : INFINITY;
  return std::sqrt(num / den);
}

// Median of `reps` timed runs of f (after 3 untimed ones), in milliseconds, by CUDA events
// on the default stream.
inline double median_ms(const std::function<void()>& f, int reps = 20) {
  cudaEvent_t e0, e1;
  check_cuda(cudaEventCreate(&e0), "cudaEventCreate");
  check_cuda(cudaEventCreate(&e1), "cudaEventCreate");
  for (int i = 0; i < 3; ++i) f();
  std::vector<float> ts;
  for (int i = 0; i < reps; ++i) {
    cudaEventRecord(e0);
    f();
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    ts.push_back(ms);
  }
  check_cuda(cudaGetLastError(), "timed op");
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  std::sort(ts.begin(), ts.end());
  return ts[ts.size() / 2];
}

}  // namespace aiscale::dev
