// Max pooling and global average pooling over NHWC activations. The max pool's backward
// gathers instead of scattering: each input value sums the gradients of the (at most
// ceil(K / stride)^2) windows that chose it, so overlapping windows need no atomics and
// the result does not depend on the order of threads.
#include "aiscale/ops/cuda/common.cuh"
#include "aiscale/ops/vision/cuda/vision_cuda.cuh"

namespace aiscale::cuda::vision {
namespace {

unsigned blocks_for(int64_t n) {
  return unsigned(std::max<int64_t>(1, std::min<int64_t>(ceil_div(n, 256), 1 << 16)));
}

template <typename T>
__global__ void maxpool_fwd(T* y, int32_t* argmax, const T* x, int64_t N, int64_t H, int64_t W,
                            int64_t C, int64_t OH, int64_t OW, int64_t K, int64_t stride,
                            int64_t pad) {
  const int64_t total = N * OH * OW * C;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = i % C;
    int64_t p = i / C;
    const int64_t ow = p % OW;
    p /= OW;
    const int64_t oh = p % OH, n = p / OH;
    float best = -INFINITY;
    int32_t where = -1;
    for (int64_t kh = 0; kh < K; ++kh) {
      const int64_t h = oh * stride - pad + kh;
      if (h < 0 || h >= H) continue;
      for (int64_t kw = 0; kw < K; ++kw) {
        const int64_t w = ow * stride - pad + kw;
        if (w < 0 || w >= W) continue;
        const float v = to_f32<T>(x[((n * H + h) * W + w) * C + c]);
        if (where < 0 || v > best) {
          best = v;
          where = int32_t(h * W + w);
        }
      }
    }
    y[i] = from_f32<T>(best);
    argmax[i] = where;
  }
}

template <typename T>
__global__ void maxpool_bwd(T* dx, const T* dy, const int32_t* argmax, int64_t N, int64_t H,
                            int64_t W, int64_t C, int64_t OH, int64_t OW, int64_t K,
                            int64_t stride, int64_t pad, bool accumulate) {
  const int64_t total = N * H * W * C;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = i % C;
    int64_t p = i / C;
    const int64_t w = p % W;
    p /= W;
    const int64_t h = p % H, n = p / H;
    // Windows oh with oh*stride - pad <= h <= oh*stride - pad + K - 1.
    const int64_t oh_lo = h + pad - K + 1 > 0 ? (h + pad - K + 1 + stride - 1) / stride : 0;
    const int64_t oh_hi = (h + pad) / stride < OH - 1 ? (h + pad) / stride : OH - 1;
    const int64_t ow_lo = w + pad - K + 1 > 0 ? (w + pad - K + 1 + stride - 1) / stride : 0;
    const int64_t ow_hi = (w + pad) / stride < OW - 1 ? (w + pad) / stride : OW - 1;
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
  }
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
