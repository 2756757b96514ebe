// The FP8 kernels (quantize, scale update) and Fp8Training; see fp8.cuh.
#include <cuda_fp8.h>

#include <cfloat>
#include <vector>

#include "aiscale/ops/cuda/common.cuh"
#include "aiscale/ops/cuda/coverage.h"
#include "aiscale/ops/cuda/fp8.cuh"

namespace aiscale::cuda {
namespace {

// A tile of 64 x 64 values per block of 256 threads; each thread reads 8 consecutive
// values of a row per pass (two passes of 32 rows) and writes their 8 codes, then, for
// the transpose, 8 codes of a column from shared memory.
constexpr int kTile = 64;
constexpr int kThreads = 256;

template <typename T>
__device__ __forceinline__ void load8(const T* p, float (&x)[8]) {
  if constexpr (sizeof(T) == 2) {
    const Pack<T> a = load_pack(p);
#pragma unroll
    for (int i = 0; i < 8; ++i) x[i] = a.get(i);
  } else {
    const Pack<T> a = load_pack(p), b = load_pack(p + 4);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      x[i] = a.get(i);
      x[4 + i] = b.get(i);
    }
  }
}

template <__nv_fp8_interpretation_t K>
__device__ __forceinline__ uint16_t encode2(float a, float b) {
  return static_cast<uint16_t>(__nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, K));
}

template <typename T, __nv_fp8_interpretation_t K>
__global__ void __launch_bounds__(kThreads)
    quantize_kernel(const T* __restrict__ in, int64_t rows, int64_t cols, uint8_t* __restrict__ out,
                    uint8_t* __restrict__ out_t, const float* __restrict__ scale_p,
                    float* __restrict__ amax_p) {
  __shared__ alignas(8) uint8_t tile[kTile][kTile + 8];
  __shared__ float red[32];
  const float s = *scale_p;
  const int64_t r0 = int64_t(blockIdx.y) * kTile, c0 = int64_t(blockIdx.x) * kTile;
  const int tr = threadIdx.x / 8, tc = (threadIdx.x % 8) * 8;
  float m = 0.0f;
#pragma unroll
  for (int pass = 0; pass < 2; ++pass) {
    const int lr = tr + pass * 32;
    const int64_t r = r0 + lr, c = c0 + tc;
    if (r < rows && c < cols) {
      float x[8];
      load8(in + r * cols + c, x);
      uint2 q;
      uint32_t* w = &q.x;
#pragma unroll
      for (int i = 0; i < 8; i += 2) {
        const float a0 = isnan(x[i]) ? INFINITY : fabsf(x[i]);
        const float a1 = isnan(x[i + 1]) ? INFINITY : fabsf(x[i + 1]);
        m = fmaxf(m, fmaxf(a0, a1));
        const uint32_t p = encode2<K>(x[i] * s, x[i + 1] * s);
        if (i % 4 == 0) w[i / 4] = p;
        else w[i / 4] |= p << 16;
      }
      if (out) *reinterpret_cast<uint2*>(out + r * cols + c) = q;
      if (out_t) *reinterpret_cast<uint2*>(&tile[lr][tc]) = q;
    }
  }
  if (out_t) {
    __syncthreads();
#pragma unroll
    for (int pass = 0; pass < 2; ++pass) {
      const int lc = tr + pass * 32, lr = tc;  // column lc of the tile, rows lr .. lr + 7
      const int64_t c = c0 + lc, r = r0 + lr;
      if (c < cols && r < rows) {
        uint2 q;
        q.x = uint32_t(tile[lr][lc]) | uint32_t(tile[lr + 1][lc]) << 8 |
              uint32_t(tile[lr + 2][lc]) << 16 | uint32_t(tile[lr + 3][lc]) << 24;
        q.y = uint32_t(tile[lr + 4][lc]) | uint32_t(tile[lr + 5][lc]) << 8 |
              uint32_t(tile[lr + 6][lc]) << 16 | uint32_t(tile[lr + 7][lc]) << 24;
        *reinterpret_cast<uint2*>(out_t + c * rows + r) = q;
      }
    }
  }
  m = block_max(m, red);
  // Non-negative floats order as their bit patterns do (+inf above every finite value).
  if (threadIdx.x == 0 && m > 0.0f) atomicMax(reinterpret_cast<int*>(amax_p), __float_as_int(m));
}

// One thread per slot: ops::fp8_scale_update (IEEE division and reciprocal, whatever the
// fast-math flags).
__global__ void scale_update_kernel(float* scale, float* scale_inv, float* amax, float* history,
                                    const uint8_t* formats, int64_t slots, int64_t H,
                                    int64_t pos, int margin, int64_t stride) {
  const int64_t s = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (s >= slots) return;
  float* h = history + s * H;
  h[pos % H] = amax[s];
  amax[s] = 0.0f;
  float m = 0.0f;
  bool finite = true;
  for (int64_t i = 0; i < H; ++i) {
    if (!(fabsf(h[i]) <= FLT_MAX)) finite = false;
    m = fmaxf(m, h[i]);
  }
  if (!finite || !(m > 0.0f)) return;
  const float fmax = ops::fp8_max(static_cast<ops::Fp8Format>(formats[s]));
  const float sc = scalbnf(__fdiv_rn(fmax, m), -margin);
  if (!(sc > 0.0f) || !(sc <= FLT_MAX)) return;
  scale[s * stride] = sc;
  scale_inv[s * stride] = __frcp_rn(sc);
}

}  // namespace

void fp8_quantize(DType t, uint8_t* out, uint8_t* out_t, float* amax, const void* inp,
                  int64_t rows, int64_t cols, const float* scale, ops::Fp8Format f,
                  cudaStream_t s) {
  AISCALE_CUDA_REQUIRE(coverage::fp8_shape_ok(rows, cols),
                       "fp8_quantize: rows and columns must be positive multiples of 16");
  AISCALE_CUDA_REQUIRE(rows / kTile < 65535, "fp8_quantize: too many rows for one grid");
  const dim3 grid(static_cast<unsigned>(ceil_div(cols, kTile)),
                  static_cast<unsigned>(ceil_div(rows, kTile)));
  dispatch_dtype(t, [&](auto tag) {
    using X = decltype(tag);
    if (f == ops::Fp8Format::e4m3)
      quantize_kernel<X, __NV_E4M3><<<grid, kThreads, 0, s>>>(static_cast<const X*>(inp), rows,
                                                              cols, out, out_t, scale, amax);
    else
      quantize_kernel<X, __NV_E5M2><<<grid, kThreads, 0, s>>>(static_cast<const X*>(inp), rows,
                                                              cols, out, out_t, scale, amax);
    AISCALE_CUDA_LAUNCH_CHECK();
  });
}

void fp8_scale_update(const ops::Fp8ScalingArrays& a, int64_t pos, int margin, cudaStream_t s) {
  if (a.slots == 0) return;
  scale_update_kernel<<<static_cast<unsigned>(ceil_div(a.slots, 128)), 128, 0, s>>>(
      a.scale, a.scale_inv, a.amax, a.history, a.formats, a.slots, a.history_len, pos, margin,
      a.scale_stride);
  AISCALE_CUDA_LAUNCH_CHECK();
}

// ---------------------------------------------------------------------------------------

Fp8Training::Fp8Training(int64_t linears, int64_t max_act, int64_t max_weight, int history,
                         int margin)
    : max_act_(max_act), max_weight_(max_weight), margin_(margin) {
  AISCALE_CUDA_REQUIRE(linears > 0 && history > 0, "Fp8Training: no linear layers or history");
  const int64_t S = 3 * linears, H = history, K = kScaleStride;
  // scale and scale_inv (S x K each: 16-byte aligned per slot), amax (S), history (S x H)
  // as floats, then the formats.
  const size_t floats = size_t(2 * S * K + S + S * H);
  const size_t state_bytes = floats * sizeof(float) + size_t(S);
  std::vector<unsigned char> host(state_bytes);
  const auto place = [&](ops::Fp8ScalingArrays& a, unsigned char* base) {
    a.scale = reinterpret_cast<float*>(base);
    a.scale_inv = a.scale + S * K;
    a.amax = a.scale_inv + S * K;
    a.history = a.amax + S;
    a.formats = base + floats * sizeof(float);
    a.slots = S;
    a.history_len = H;
    a.scale_stride = K;
  };
  ops::Fp8ScalingArrays h;
  place(h, host.data());
  uint8_t* formats = host.data() + floats * sizeof(float);
  for (int64_t i = 0; i < S; ++i)
    formats[i] = static_cast<uint8_t>(format(i));
  ops::fp8_scaling_reset(h);
  AISCALE_CUDA_CHECK(cudaMalloc(&state_, state_bytes));
  AISCALE_CUDA_CHECK(cudaMemcpy(state_, host.data(), state_bytes, cudaMemcpyHostToDevice));
  place(arrays_, static_cast<unsigned char*>(state_));
  // Operands: x (or x^T), dout, dout^T of up to max_act codes; w (or w^T) of max_weight.
  const size_t act = size_t(max_act), wb = size_t(max_weight);
  AISCALE_CUDA_CHECK(cudaMalloc(&x_, 3 * act + wb));
  g_ = x_ + act;
  g_t_ = g_ + act;
  w_ = g_t_ + act;
  bytes_ = state_bytes + 3 * act + wb;
}

Fp8Training::~Fp8Training() {
  cudaFree(state_);
  cudaFree(x_);
}

void Fp8Training::quantize(DType t, uint8_t* out, uint8_t* out_t, const void* inp, int64_t rows,
                           int64_t cols, int64_t slot, cudaStream_t s) {
  fp8_quantize(t, out, out_t, arrays_.amax + slot, inp, rows, cols,
               arrays_.scale + kScaleStride * slot, format(slot), s);
}

Fp8Operand Fp8Training::operand(const uint8_t* data, int64_t slot) const {
  Fp8Operand o;
  o.data = data;
  o.scale_inv = arrays_.scale_inv + slot * kScaleStride;
  o.format = format(slot);
  return o;
}

bool Fp8Training::forward(Gemm& g, DType t, int64_t id, void* out, void* pre_gelu,
                          const void* inp, const void* weight, const void* bias,
                          const void* residual, int64_t N, int64_t C, int64_t OC,
                          const LinearOptions& o, cudaStream_t s) {
  if (!coverage::fp8_gemm_ok(N, C, OC) || N * C > max_act_ || OC * C > max_weight_) return false;
  const int64_t sx = slot(id, kInput), sw = slot(id, kWeight);
  mark("fp8_quantize");
  quantize(t, x_, nullptr, inp, N, C, sx, s);
  quantize(t, w_, nullptr, weight, OC, C, sw, s);
  mark("matmul_forward", 2.0 * N * C * OC);
  return fp8_linear_forward(g, t, out, pre_gelu, operand(x_, sx), operand(w_, sw), bias, residual,
                            N, C, OC, o, s);
}

bool Fp8Training::backward_weight(Gemm& g, DType t, int64_t id, float* dweight, float* dbias,
                                  const void* dout, const void* inp, int64_t N, int64_t C,
                                  int64_t OC, float* bias_scratch, cudaStream_t s) {
  pending_id_ = -1;
  if (!coverage::fp8_gemm_ok(N, C, OC) || N * C > max_act_ || N * OC > max_act_ || OC * C > max_weight_)
    return false;
  const int64_t sx = slot(id, kInput), sg = slot(id, kGrad);
  mark("fp8_quantize");
  quantize(t, g_, g_t_, dout, N, OC, sg, s);
  quantize(t, nullptr, x_, inp, N, C, sx, s);
  mark("matmul_backward", 2.0 * N * C * OC);
  if (!fp8_linear_backward_weight(g, dweight, operand(g_t_, sg), operand(x_, sx), N, C, OC, s))
    return false;
  if (dbias) bias_grad(t, dbias, dout, N, OC, false, bias_scratch, s);
  pending_id_ = id;
  return true;
}

bool Fp8Training::backward_input(Gemm& g, DType t, int64_t id, void* dinp, const void* weight,
                                 int64_t N, int64_t C, int64_t OC, const void* gelu_pre,
                                 float* dbias_gelu, float* bias_scratch, cudaStream_t s) {
  if (pending_id_ != id) return false;
  pending_id_ = -1;
  const int64_t sw = slot(id, kWeight), sg = slot(id, kGrad);
  mark("fp8_quantize");
  quantize(t, nullptr, w_, weight, OC, C, sw, s);
  mark("matmul_backward", 2.0 * N * C * OC);
  return fp8_linear_backward_input(g, t, dinp, operand(g_, sg), operand(w_, sw), N, C, OC,
                                   gelu_pre, dbias_gelu, bias_scratch, s);
}

void Fp8Training::update_scales(cudaStream_t s) {
  fp8_scale_update(arrays_, steps_ % arrays_.history_len, margin_, s);
  ++steps_;
}

}  // namespace aiscale::cuda
