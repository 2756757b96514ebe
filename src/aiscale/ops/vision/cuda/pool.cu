// Max pooling and global average pooling over NHWC activations. The max pool's backward
// gathers instead of scattering: each input value sums the gradients of the (at most
// ceil(K / stride)^2) windows that chose it, so overlapping windows need no atomics and
// the result does not depend on the order of threads.
//
// Where the channels come in whole 16-byte groups (C a multiple of 8 in bf16/fp16, of 4 in
// fp32) each thread takes one group: 16-byte loads and stores, and the position arithmetic
// once per group instead of once per value. ResNet-50's stem pool (256 x 112 x 112 x 64
// bf16 in, 3x3 stride 2) moves ~0.7 GB each way, ~0.25 ms at the H100's bandwidth; a
// thread per value spent 1.3 ms forward and 3.1 ms backward in 64-bit index divisions.
#include <cstdint>
#include <initializer_list>

#include "aiscale/ops/cuda/common.cuh"
#include "aiscale/ops/vision/cuda/vision_cuda.cuh"

namespace aiscale::cuda::vision {
namespace {

unsigned blocks_for(int64_t n) {
  return unsigned(std::max<int64_t>(1, std::min<int64_t>(ceil_div(n, 256), 1 << 16)));
}

// f(i, n, h, w, c) for every element i of an NHWC tensor of N x H x W x C, at its
// position, over a grid-stride loop.
template <typename I, typename F>
__device__ __forceinline__ void for_each_nhwc(int64_t N, I H, I W, I C, F&& f) {
  const int64_t total = N * H * W * C;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const I c = I(i % C);
    int64_t p = i / C;
    const I w = I(p % W);
    p /= W;
    const I h = I(p % H);
    f(i, p / H, h, w, c);
  }
}

// f(h, w) for the input positions of H x W inside output (oh, ow)'s K x K window, which
// starts at (oh, ow) * stride - pad.
template <typename I, typename F>
__device__ __forceinline__ void for_each_in_window(I oh, I ow, I K, I stride, I pad, I H, I W,
                                                   F&& f) {
  for (I kh = 0; kh < K; ++kh) {
    const I h = oh * stride - pad + kh;
    if (h < 0 || h >= H) continue;
    for (I kw = 0; kw < K; ++kw) {
      const I w = ow * stride - pad + kw;
      if (w < 0 || w >= W) continue;
      f(h, w);
    }
  }
}

// The outputs [lo, hi] of n whose K-wide windows (stride, pad) cover input position x:
// lo * stride - pad <= x <= hi * stride - pad + K - 1.
template <typename I>
__device__ __forceinline__ void covering_windows(I x, I K, I stride, I pad, I n, I& lo, I& hi) {
  lo = x + pad - K + 1 > 0 ? (x + pad - K + 1 + stride - 1) / stride : 0;
  hi = (x + pad) / stride < n - 1 ? (x + pad) / stride : n - 1;
}

template <typename T>
__global__ void maxpool_fwd(T* y, int32_t* argmax, const T* x, int64_t N, int64_t H, int64_t W,
                            int64_t C, int64_t OH, int64_t OW, int64_t K, int64_t stride,
                            int64_t pad) {
  for_each_nhwc(N, OH, OW, C, [&](int64_t i, int64_t n, int64_t oh, int64_t ow, int64_t c) {
    float best = -INFINITY;
    int32_t where = -1;
    for_each_in_window(oh, ow, K, stride, pad, H, W, [&](int64_t h, int64_t w) {
      const float v = to_f32<T>(x[((n * H + h) * W + w) * C + c]);
      if (where < 0 || v > best) {
        best = v;
        where = int32_t(h * W + w);
      }
    });
    y[i] = from_f32<T>(best);
    argmax[i] = where;
  });
}

template <typename T>
__global__ void maxpool_bwd(T* dx, const T* dy, const int32_t* argmax, int64_t N, int64_t H,
                            int64_t W, int64_t C, int64_t OH, int64_t OW, int64_t K,
                            int64_t stride, int64_t pad, bool accumulate) {
  for_each_nhwc(N, H, W, C, [&](int64_t i, int64_t n, int64_t h, int64_t w, int64_t c) {
    int64_t oh_lo, oh_hi, ow_lo, ow_hi;
    covering_windows(h, K, stride, pad, OH, oh_lo, oh_hi);
    covering_windows(w, K, stride, pad, OW, ow_lo, ow_hi);
    const int32_t me = int32_t(h * W + w);
    float g = 0.f;
    for (int64_t oh = oh_lo; oh <= oh_hi; ++oh) {
      for (int64_t ow = ow_lo; ow <= ow_hi; ++ow) {
        const int64_t o = ((n * OH + oh) * OW + ow) * C + c;
        if (argmax[o] == me) g += to_f32<T>(dy[o]);
      }
    }
    if (accumulate) g += to_f32<T>(dx[i]);
    dx[i] = from_f32<T>(g);
  });
}

// The vectorised pair: V channels (16 bytes of T) per thread.
template <typename T, int V>
struct alignas(16) Pack {
  T v[V];
};
struct alignas(16) Int4 {
  int32_t v[4];
};

template <typename T, int V>
__global__ void maxpool_fwd_vec(T* y, int32_t* argmax, const T* x, int64_t N, int H, int W,
                                int C, int OH, int OW, int K, int stride, int pad) {
  for_each_nhwc(N, OH, OW, C / V, [&](int64_t, int64_t n, int oh, int ow, int cv) {
    float best[V];
    int32_t where[V];
#pragma unroll
    for (int v = 0; v < V; ++v) best[v] = -INFINITY, where[v] = -1;
    for_each_in_window(oh, ow, K, stride, pad, H, W, [&](int h, int w) {
      const Pack<T, V> in = *reinterpret_cast<const Pack<T, V>*>(x + ((n * H + h) * W + w) * C + cv * V);
      const int32_t here = h * W + w;
#pragma unroll
      for (int v = 0; v < V; ++v) {
        const float f = to_f32<T>(in.v[v]);
        if (where[v] < 0 || f > best[v]) best[v] = f, where[v] = here;
      }
    });
    const int64_t o = ((n * OH + oh) * OW + ow) * C + cv * V;
    Pack<T, V> out;
#pragma unroll
    for (int v = 0; v < V; ++v) out.v[v] = from_f32<T>(best[v]);
    *reinterpret_cast<Pack<T, V>*>(y + o) = out;
#pragma unroll
    for (int q = 0; q < V / 4; ++q) {
      Int4 a;
#pragma unroll
      for (int v = 0; v < 4; ++v) a.v[v] = where[4 * q + v];
      *reinterpret_cast<Int4*>(argmax + o + 4 * q) = a;
    }
  });
}

template <typename T, int V>
__global__ void maxpool_bwd_vec(T* dx, const T* dy, const int32_t* argmax, int64_t N, int H,
                                int W, int C, int OH, int OW, int K, int stride, int pad,
                                bool accumulate) {
  for_each_nhwc(N, H, W, C / V, [&](int64_t, int64_t n, int h, int w, int cv) {
    int oh_lo, oh_hi, ow_lo, ow_hi;
    covering_windows(h, K, stride, pad, OH, oh_lo, oh_hi);
    covering_windows(w, K, stride, pad, OW, ow_lo, ow_hi);
    const int32_t me = h * W + w;
    float g[V];
#pragma unroll
    for (int v = 0; v < V; ++v) g[v] = 0.f;
    for (int oh = oh_lo; oh <= oh_hi; ++oh) {
      for (int ow = ow_lo; ow <= ow_hi; ++ow) {
        const int64_t o = ((n * OH + oh) * OW + ow) * C + cv * V;
        const Pack<T, V> d = *reinterpret_cast<const Pack<T, V>*>(dy + o);
#pragma unroll
        for (int q = 0; q < V / 4; ++q) {
          const Int4 a = *reinterpret_cast<const Int4*>(argmax + o + 4 * q);
#pragma unroll
          for (int v = 0; v < 4; ++v)
            if (a.v[v] == me) g[4 * q + v] += to_f32<T>(d.v[4 * q + v]);
        }
      }
    }
    const int64_t at = ((n * H + h) * W + w) * C + cv * V;
    Pack<T, V> out;
    if (accumulate) out = *reinterpret_cast<const Pack<T, V>*>(dx + at);
#pragma unroll
    for (int v = 0; v < V; ++v) out.v[v] = from_f32<T>(g[v] + (accumulate ? to_f32<T>(out.v[v]) : 0.f));
    *reinterpret_cast<Pack<T, V>*>(dx + at) = out;
  });
}

// Whether the vectorised kernels take this call: whole 16-byte channel groups, aligned
// buffers, positions within int32.
bool vectorised(int64_t C, int64_t values_per_16_bytes, int64_t H, int64_t W,
                std::initializer_list<const void*> ptrs) {
  if (C % values_per_16_bytes != 0 || H * W >= (int64_t(1) << 31)) return false;
  for (const void* q : ptrs)
    if (reinterpret_cast<uintptr_t>(q) % 16 != 0) return false;
  return true;
}

template <typename T>
__global__ void avgpool_fwd(T* y, const T* x, int64_t N, int64_t HW, int64_t C) {
  const int64_t total = N * C;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = i % C, n = i / C;
    const T* base = x + n * HW * C + c;
    float s = 0.f;
    for (int64_t p = 0; p < HW; ++p) s += to_f32<T>(base[p * C]);
    y[i] = from_f32<T>(s / float(HW));
  }
}

template <typename T>
__global__ void avgpool_bwd(T* dx, const T* dy, int64_t N, int64_t HW, int64_t C,
                            bool accumulate) {
  const int64_t total = N * HW * C;
  const float inv = 1.f / float(HW);
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = i % C, n = i / (HW * C);
    float g = to_f32<T>(dy[n * C + c]) * inv;
    if (accumulate) g += to_f32<T>(dx[i]);
    dx[i] = from_f32<T>(g);
  }
}

int64_t pooled(int64_t size, int64_t K, int64_t stride, int64_t pad) {
  return (size + 2 * pad - K) / stride + 1;
}

}  // namespace

void maxpool_forward(DType t, void* y, int32_t* argmax, const void* x, int64_t N, int64_t H,
                     int64_t W, int64_t C, int64_t K, int64_t stride, int64_t pad,
                     cudaStream_t s) {
  const int64_t OH = pooled(H, K, stride, pad), OW = pooled(W, K, stride, pad);
  dispatch_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    constexpr int V = 16 / sizeof(T);
    if (vectorised(C, V, H, W, {y, argmax, x})) {
      maxpool_fwd_vec<T, V><<<blocks_for(N * OH * OW * (C / V)), 256, 0, s>>>(
          static_cast<T*>(y), argmax, static_cast<const T*>(x), N, int(H), int(W), int(C),
          int(OH), int(OW), int(K), int(stride), int(pad));
      return;
    }
    maxpool_fwd<T><<<blocks_for(N * OH * OW * C), 256, 0, s>>>(
        static_cast<T*>(y), argmax, static_cast<const T*>(x), N, H, W, C, OH, OW, K, stride,
        pad);
  });
  AISCALE_CUDA_LAUNCH_CHECK();
}

void maxpool_backward(DType t, void* dx, const void* dy, const int32_t* argmax, int64_t N,
                      int64_t H, int64_t W, int64_t C, int64_t K, int64_t stride, int64_t pad,
                      bool accumulate, cudaStream_t s) {
  const int64_t OH = pooled(H, K, stride, pad), OW = pooled(W, K, stride, pad);
  dispatch_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    constexpr int V = 16 / sizeof(T);
    if (vectorised(C, V, H, W, {dx, dy, argmax})) {
      maxpool_bwd_vec<T, V><<<blocks_for(N * H * W * (C / V)), 256, 0, s>>>(
          static_cast<T*>(dx), static_cast<const T*>(dy), argmax, N, int(H), int(W), int(C),
          int(OH), int(OW), int(K), int(stride), int(pad), accumulate);
      return;
    }
    maxpool_bwd<T><<<blocks_for(N * H * W * C), 256, 0, s>>>(
        static_cast<T*>(dx), static_cast<const T*>(dy), argmax, N, H, W, C, OH, OW, K, stride,
        pad, accumulate);
  });
  AISCALE_CUDA_LAUNCH_CHECK();
}

void avgpool_forward(DType t, void* y, const void* x, int64_t N, int64_t HW, int64_t C,
                     cudaStream_t s) {
  dispatch_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    avgpool_fwd<T><<<blocks_for(N * C), 256, 0, s>>>(static_cast<T*>(y),
                                                      static_cast<const T*>(x), N, HW, C);
  });
  AISCALE_CUDA_LAUNCH_CHECK();
}

void avgpool_backward(DType t, void* dx, const void* dy, int64_t N, int64_t HW, int64_t C,
                      bool accumulate, cudaStream_t s) {
  dispatch_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    avgpool_bwd<T><<<blocks_for(N * HW * C), 256, 0, s>>>(
        static_cast<T*>(dx), static_cast<const T*>(dy), N, HW, C, accumulate);
  });
  AISCALE_CUDA_LAUNCH_CHECK();
}

}  // namespace aiscale::cuda::vision
