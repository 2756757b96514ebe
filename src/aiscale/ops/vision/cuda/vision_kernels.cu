// The small vision kernels: label-smoothed softmax cross-entropy with its gradient and the
// top-1/top-5 counts in one pass per row, the classifier's bias gradient, SGD with
// momentum (which also refreshes the 16-bit compute copy of the weights under AMP), and
// the type and layout conversions around them.
#include "aiscale/ops/cuda/cast_kernels.cuh"
#include "aiscale/ops/cuda/common.cuh"
#include "aiscale/ops/vision/cuda/vision_cuda.cuh"

namespace aiscale::cuda::vision {
namespace {

unsigned blocks_for(int64_t n) {
  return unsigned(std::max<int64_t>(1, std::min<int64_t>(ceil_div(n, 256), 1 << 16)));
}

// One block per row.
template <typename T>
__global__ void xent_rows(float* losses, T* dlogits, int32_t* correct, const T* logits,
                          const int32_t* labels, int64_t V, float smoothing, float dloss) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const T* z = logits + row * V;
  const int32_t label = labels[row];
  const float zt = to_f32<T>(z[label]);
  float m = -INFINITY, above = 0.f;
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x) {
    const float v = to_f32<T>(z[j]);
    m = fmaxf(m, v);
    if (j != label && v >= zt) above += 1.f;
  }
  m = block_max(m, scratch);
  above = block_sum(above, scratch);
  float se = 0.f, sz = 0.f;
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x) {
    const float v = to_f32<T>(z[j]);
    se += __expf(v - m);
    sz += v;
  }
  se = block_sum(se, scratch);
  sz = block_sum(sz, scratch);
  const float logz = logf(se) + m;
  const float uniform = smoothing / float(V);
  if (threadIdx.x == 0) {
    // -sum q_j (z_j - logz) with q = (1 - eps) onehot + eps / V.
    losses[row] = logz - (1.f - smoothing) * zt - uniform * sz;
    if (correct) {
      if (above < 1.f) atomicAdd(correct, 1);
      if (above < 5.f) atomicAdd(correct + 1, 1);
    }
  }
  if (!dlogits) return;
  T* d = dlogits + row * V;
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x) {
    const float p = __expf(to_f32<T>(z[j]) - logz);
    const float q = (j == label ? 1.f - smoothing : 0.f) + uniform;
    d[j] = from_f32<T>(dloss * (p - q));
  }
}

template <typename T>
__global__ void column_sums(float* dbias, const T* dout, int64_t N, int64_t OC) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= OC) return;
  float s = 0.f;
  for (int64_t n = 0; n < N; ++n) s += to_f32<T>(dout[n * OC + c]);
  dbias[c] += s;
}

template <typename T>
__global__ void sgd(float* p, const float* grads, float* v, int64_t n, float lr, float mu,
                    bool nesterov, float wd, int64_t decay_end, float grad_scale, T* copy,
                    int64_t copy_end) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    float w = p[i];
    float g = grads[i] * grad_scale;
    if (i < decay_end) g += wd * w;
    const float vel = mu * v[i] + g;
    v[i] = vel;
    w -= lr * (nesterov ? g + mu * vel : vel);
    p[i] = w;
    if (copy && i < copy_end) copy[i] = from_f32<T>(w);
  }
}

template <typename T>
__global__ void add_f32(float* dst, const T* src, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    dst[i] += to_f32<T>(src[i]);
}


template <typename T>
__global__ void to_nhwc(T* dst, const float* src, int64_t N, int64_t C, int64_t HW) {
  const int64_t total = N * HW * C;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = i % C, p = i / C, hw = p % HW, n = p / HW;
    dst[i] = from_f32<T>(src[(n * C + c) * HW + hw]);
  }
}

}  // namespace

void xent_smooth(DType t, float* losses, void* dlogits, int32_t* correct, const void* logits,
                 const int32_t* labels, int64_t N, int64_t V, float smoothing, float dloss,
                 cudaStream_t s) {
  if (correct) AISCALE_CUDA_CHECK(cudaMemsetAsync(correct, 0, 2 * sizeof(int32_t), s));
  dispatch_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    xent_rows<T><<<unsigned(N), 256, 0, s>>>(losses, static_cast<T*>(dlogits), correct,
                                             static_cast<const T*>(logits), labels, V,
                                             smoothing, dloss);
  });
  AISCALE_CUDA_LAUNCH_CHECK();
}

void column_sum_add(DType t, float* dbias, const void* dout, int64_t N, int64_t OC,
                    cudaStream_t s) {
  dispatch_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    column_sums<T><<<unsigned(ceil_div(OC, 256)), 256, 0, s>>>(
        dbias, static_cast<const T*>(dout), N, OC);
  });
  AISCALE_CUDA_LAUNCH_CHECK();
}

void sgd_step(float* params, const float* grads, float* velocity, int64_t n, float lr,
              float momentum, bool nesterov, float weight_decay, int64_t decay_end,
              float grad_scale, DType t, void* copy, int64_t copy_end, cudaStream_t s) {
  dispatch_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    sgd<T><<<blocks_for(n), 256, 0, s>>>(params, grads, velocity, n, lr, momentum, nesterov,
                                         weight_decay, decay_end, grad_scale,
                                         static_cast<T*>(copy), copy_end);
  });
  AISCALE_CUDA_LAUNCH_CHECK();
}

void add_to_f32(float* dst, const void* src, DType t, int64_t n, cudaStream_t s) {
  dispatch_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    add_f32<T><<<blocks_for(n), 256, 0, s>>>(dst, static_cast<const T*>(src), n);
  });
  AISCALE_CUDA_LAUNCH_CHECK();
}

void convert_from_f32(void* dst, DType t, const float* src, int64_t n, cudaStream_t s) {
  dispatch_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    cast_from_f32_kernel<T><<<blocks_for(n), 256, 0, s>>>(static_cast<T*>(dst), src, n);
  });
  AISCALE_CUDA_LAUNCH_CHECK();
}

void nchw_to_nhwc(DType t, void* dst, const float* src, int64_t N, int64_t C, int64_t HW,
                  cudaStream_t s) {
  dispatch_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    to_nhwc<T><<<blocks_for(N * HW * C), 256, 0, s>>>(static_cast<T*>(dst), src, N, C, HW);
  });
  AISCALE_CUDA_LAUNCH_CHECK();
}

}  // namespace aiscale::cuda::vision
