// Causal attention, the CUDA-core kernels (`simple`; see common.cuh for the family).
#pragma once
#include "aiscale/ops/cuda/attention/common.cuh"

namespace aiscale::cuda {
namespace {

// ---------------------------------------------------------------------------------------
// simple kernels: one thread per row, 32 rows per block, fp32 math, tiles in shared memory

constexpr int kSimpleRows = 32;

template <typename T, int HS>
__device__ __forceinline__ void load_rows_f32(float* dst, const T* base, int64_t row_stride,
                                              int row0, int T_) {
  for (int idx = threadIdx.x; idx < kSimpleRows * HS; idx += blockDim.x) {
    const int r = idx / HS, d = idx % HS;
    const int row = row0 + r;
    dst[idx] = row < T_ ? to_f32<T>(base[int64_t(row) * row_stride + d]) : 0.0f;
  }
}

template <int HS>
__device__ __forceinline__ float dot_smem(const float (&a)[HS], const float* row) {
  float s = 0.0f;
#pragma unroll
  for (int d = 0; d < HS; d += 4) {
    const float4 v = *reinterpret_cast<const float4*>(row + d);
    s += a[d] * v.x + a[d + 1] * v.y + a[d + 2] * v.z + a[d + 3] * v.w;
  }
  return s;
}

// grid (ceil(T / 32), B * NH), 32 threads; shared: K, V tiles (32 x HS fp32 each).
template <typename T, int HS>
__global__ void simple_forward_kernel(T* out, float* lse, const T* qkv, int T_, int NH, int C,
                                      float scale_log2) {
  __shared__ alignas(16) float sK[kSimpleRows * HS];
  __shared__ alignas(16) float sV[kSimpleRows * HS];
  const int q0 = blockIdx.x * kSimpleRows;
  const int query = q0 + threadIdx.x;
  const HeadRows<T> rows(qkv, NH, T_, C, HS);
  float q[HS], acc[HS];
#pragma unroll
  for (int d = 0; d < HS; ++d) {
    q[d] = query < T_ ? to_f32<T>(rows.q[int64_t(query) * rows.stride + d]) * scale_log2 : 0.0f;
    acc[d] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  const int last_key = min(T_ - 1, q0 + kSimpleRows - 1);
  for (int k0 = 0; k0 <= last_key; k0 += kSimpleRows) {
    __syncthreads();
    load_rows_f32<T, HS>(sK, rows.k, rows.stride, k0, T_);
    load_rows_f32<T, HS>(sV, rows.v, rows.stride, k0, T_);
    __syncthreads();
    for (int kk = 0; kk < kSimpleRows; ++kk) {
      const int key = k0 + kk;
      if (key > query || key >= T_) break;
      float s = 0.0f;
#pragma unroll
      for (int d = 0; d < HS; d += 4) {
        const float4 v = *reinterpret_cast<const float4*>(sK + kk * HS + d);
        s += q[d] * v.x + q[d + 1] * v.y + q[d + 2] * v.z + q[d + 3] * v.w;
      }
      if (s > m) {
        const float c = exp2f(m - s);
        l *= c;
#pragma unroll
        for (int d = 0; d < HS; ++d) acc[d] *= c;
        m = s;
      }
      const float p = exp2f(s - m);
      l += p;
#pragma unroll
      for (int d = 0; d < HS; d += 4) {
        const float4 v = *reinterpret_cast<const float4*>(sV + kk * HS + d);
        acc[d] += p * v.x;
        acc[d + 1] += p * v.y;
        acc[d + 2] += p * v.z;
        acc[d + 3] += p * v.w;
      }
    }
  }
  if (query < T_) {
    T* o = out + (int64_t(rows.b) * T_ + query) * C + rows.h * HS;
    const float inv = 1.0f / l;
#pragma unroll
    for (int d = 0; d < HS; ++d) o[d] = from_f32<T>(acc[d] * inv);
    lse[int64_t(rows.bh) * T_ + query] = m + __log2f(l);
  }
}

// dK, dV: one thread per key; loops over the queries at or after it. Dynamic shared
// memory: Q and dO tiles (32 x HS fp32), lse, delta (32).
template <typename T, int HS>
__global__ void simple_backward_dkdv_kernel(T* dqkv, const T* qkv, const T* dout,
                                            const float* lse, const float* delta, int T_, int NH,
                                            int C, float scale_log2, float scale) {
  extern __shared__ __align__(16) float smem_f[];
  float* sQ = smem_f;
  float* sdO = sQ + kSimpleRows * HS;
  float* sL = sdO + kSimpleRows * HS;
  float* sD = sL + kSimpleRows;
  const int k0 = blockIdx.x * kSimpleRows;
  const int key = k0 + threadIdx.x;
  const HeadRows<T> rows(qkv, NH, T_, C, HS);
  const T* do_base = dout + int64_t(rows.b) * T_ * C + rows.h * HS;
  float k[HS], v[HS], dk[HS], dv[HS];
#pragma unroll
  for (int d = 0; d < HS; ++d) {
    k[d] = key < T_ ? to_f32<T>(rows.k[int64_t(key) * rows.stride + d]) : 0.0f;
    v[d] = key < T_ ? to_f32<T>(rows.v[int64_t(key) * rows.stride + d]) : 0.0f;
    dk[d] = 0.0f;
    dv[d] = 0.0f;
  }
  for (int q0 = k0; q0 < T_; q0 += kSimpleRows) {
    __syncthreads();
    load_rows_f32<T, HS>(sQ, rows.q, rows.stride, q0, T_);
    load_rows_f32<T, HS>(sdO, do_base, C, q0, T_);
    if (threadIdx.x < kSimpleRows) {
      const int q = q0 + threadIdx.x;
      sL[threadIdx.x] = q < T_ ? lse[int64_t(rows.bh) * T_ + q] : 0.0f;
      sD[threadIdx.x] = q < T_ ? delta[int64_t(rows.bh) * T_ + q] : 0.0f;
    }
    __syncthreads();
    if (key >= T_) continue;
    for (int qq = 0; qq < kSimpleRows; ++qq) {
      const int q = q0 + qq;
      if (q < key || q >= T_) continue;
      const float s = dot_smem<HS>(k, sQ + qq * HS) * scale_log2;
      const float p = exp2f(s - sL[qq]);
      const float dp = dot_smem<HS>(v, sdO + qq * HS);
      const float ds = p * (dp - sD[qq]);
#pragma unroll
      for (int d = 0; d < HS; ++d) {
        dv[d] += p * sdO[qq * HS + d];
        dk[d] += ds * sQ[qq * HS + d];
      }
    }
  }
  if (key < T_) {
    T* drow = dqkv + (int64_t(rows.b) * T_ + key) * rows.stride + rows.h * HS;
#pragma unroll
    for (int d = 0; d < HS; ++d) {
      drow[C + d] = from_f32<T>(dk[d] * scale);
      drow[2 * C + d] = from_f32<T>(dv[d]);
    }
  }
}

// dQ: one thread per query; loops over the keys at or before it. Shared: K, V tiles.
template <typename T, int HS>
__global__ void simple_backward_dq_kernel(T* dqkv, const T* qkv, const T* dout,
                                          const float* lse, const float* delta, int T_, int NH,
                                          int C, float scale_log2, float scale) {
  extern __shared__ __align__(16) float smem_f[];
  float* sK = smem_f;
  float* sV = sK + kSimpleRows * HS;
  const int q0 = blockIdx.x * kSimpleRows;
  const int query = q0 + threadIdx.x;
  const HeadRows<T> rows(qkv, NH, T_, C, HS);
  const T* do_base = dout + int64_t(rows.b) * T_ * C + rows.h * HS;
  float q[HS], dO[HS], dq[HS];
  const bool valid = query < T_;
#pragma unroll
  for (int d = 0; d < HS; ++d) {
    q[d] = valid ? to_f32<T>(rows.q[int64_t(query) * rows.stride + d]) : 0.0f;
    dO[d] = valid ? to_f32<T>(do_base[int64_t(query) * C + d]) : 0.0f;
    dq[d] = 0.0f;
  }
  const float L = valid ? lse[int64_t(rows.bh) * T_ + query] : 0.0f;
  const float D = valid ? delta[int64_t(rows.bh) * T_ + query] : 0.0f;
  const int last_key = min(T_ - 1, q0 + kSimpleRows - 1);
  for (int k0 = 0; k0 <= last_key; k0 += kSimpleRows) {
    __syncthreads();
    load_rows_f32<T, HS>(sK, rows.k, rows.stride, k0, T_);
    load_rows_f32<T, HS>(sV, rows.v, rows.stride, k0, T_);
    __syncthreads();
    if (!valid) continue;
    for (int kk = 0; kk < kSimpleRows; ++kk) {
      const int key = k0 + kk;
      if (key > query) break;
      const float s = dot_smem<HS>(q, sK + kk * HS) * scale_log2;
      const float p = exp2f(s - L);
      const float dp = dot_smem<HS>(dO, sV + kk * HS);
      const float ds = p * (dp - D);
#pragma unroll
      for (int d = 0; d < HS; ++d) dq[d] += ds * sK[kk * HS + d];
    }
  }
  if (valid) {
    T* drow = dqkv + (int64_t(rows.b) * T_ + query) * rows.stride + rows.h * HS;
#pragma unroll
    for (int d = 0; d < HS; ++d) drow[d] = from_f32<T>(dq[d] * scale);
  }
}

}  // namespace
}  // namespace aiscale::cuda
