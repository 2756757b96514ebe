// Fused AdamW over the whole flat parameter buffer (fp32 master weights, m, v, grads) that
// also writes the low-precision working copy the GEMMs read; and the gradient sum of
// squares for global-norm clipping. Both deterministic.
#include <cmath>

#include "aiscale/ops/cuda/common.cuh"
#include "aiscale/ops/cuda/cuda_ops.cuh"

namespace aiscale::cuda {
namespace {

constexpr int kSumBlocks = 1024;
constexpr int kSumThreads = 256;

__device__ __forceinline__ bool decays(const AdamWLayout& L, int64_t i) {
  if (i < L.embeddings_end) return L.decay_embeddings;
  if (i >= L.tail_decay_begin && i < L.tail_decay_end) return true;
  const int64_t r = i - L.layers_begin;
  if (r < 0 || r >= L.n_layer * L.layer_size) return false;
  const int64_t w = r % L.layer_size;
#pragma unroll
  for (int j = 0; j < 4; ++j)
    if (w >= L.decay_begin[j] && w < L.decay_end[j]) return true;
  return false;
}

struct AdamWScalars {
  float beta1, beta2, one_minus_beta1, one_minus_beta2, eps, grad_scale;
  float step_size, bias_correction2_sqrt, decay_factor;
};

template <typename T>
__device__ __forceinline__ float adamw_one(float p, float grad, float& m, float& v, bool decay,
                                           const AdamWScalars& k) {
  const float g = grad * k.grad_scale;
  m += k.one_minus_beta1 * (g - m);
  v = k.beta2 * v + k.one_minus_beta2 * g * g;
  const float denom = sqrtf(v) / k.bias_correction2_sqrt + k.eps;
  return p * (decay ? k.decay_factor : 1.0f) - k.step_size * (m / denom);
}

// Each thread updates 4 consecutive values (float4 loads where aligned), the tail one by one.
template <typename T>
__global__ void adamw_kernel(float* master, T* work, const float* grads, float* mom1,
                             float* mom2, AdamWLayout L, AdamWScalars k) {
  const int64_t i0 = L.begin + (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * 4;
  if (i0 >= L.n) return;
  const int64_t s0 = i0 - L.begin + L.state_offset;  // index into master, m, v
  if (L.vector_ok && i0 + 4 <= L.n) {
    float4 p = *reinterpret_cast<const float4*>(master + s0);
    const float4 g = __ldcs(reinterpret_cast<const float4*>(grads + i0));
    float4 m = *reinterpret_cast<const float4*>(mom1 + s0);
    float4 v = *reinterpret_cast<const float4*>(mom2 + s0);
    p.x = adamw_one<T>(p.x, g.x, m.x, v.x, decays(L, i0 + 0), k);
    p.y = adamw_one<T>(p.y, g.y, m.y, v.y, decays(L, i0 + 1), k);
    p.z = adamw_one<T>(p.z, g.z, m.z, v.z, decays(L, i0 + 2), k);
    p.w = adamw_one<T>(p.w, g.w, m.w, v.w, decays(L, i0 + 3), k);
    *reinterpret_cast<float4*>(master + s0) = p;
    *reinterpret_cast<float4*>(mom1 + s0) = m;
    *reinterpret_cast<float4*>(mom2 + s0) = v;
    if (work) {
      const float vals[4] = {p.x, p.y, p.z, p.w};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int64_t i = i0 + j;
        work[i < L.work_split ? i : i + L.work_shift] = from_f32<T>(vals[j]);
      }
    }
  } else {
    const int64_t end = i0 + 4 < L.n ? i0 + 4 : L.n;
    for (int64_t i = i0; i < end; ++i) {
      const int64_t si = i - L.begin + L.state_offset;
      float m = mom1[si], v = mom2[si];
      const float p = adamw_one<T>(master[si], grads[i], m, v, decays(L, i), k);
      master[si] = p;
      mom1[si] = m;
      mom2[si] = v;
      if (work) work[i < L.work_split ? i : i + L.work_shift] = from_f32<T>(p);
    }
  }
}

__global__ void sum_squares_partial_kernel(double* partials, const float* x, int64_t n) {
  __shared__ float scratch[32];
  float s = 0.0f;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float v = x[i];
    s += v * v;
  }
  s = block_sum(s, scratch);
  if (threadIdx.x == 0) partials[blockIdx.x] = static_cast<double>(s);
}

__global__ void sum_squares_final_kernel(double* out, const double* partials, int n) {
  if (threadIdx.x != 0) return;
  double s = 0.0;
  for (int i = 0; i < n; ++i) s += partials[i];
  out[0] = s;
}

}  // namespace

void adamw_update(DType t, float* master, void* work, const float* grads, float* m, float* v,
                  const AdamWLayout& layout, const ops::AdamWParams& hp, cudaStream_t s) {
  if (layout.n <= 0) return;
  AdamWScalars k;
  k.beta1 = hp.beta1;
  k.beta2 = hp.beta2;
  k.one_minus_beta1 = 1.0f - hp.beta1;
  k.one_minus_beta2 = 1.0f - hp.beta2;
  k.eps = hp.eps;
  k.grad_scale = hp.grad_scale;
  const double bc1 = 1.0 - std::pow(double(hp.beta1), double(hp.step));
  const double bc2 = 1.0 - std::pow(double(hp.beta2), double(hp.step));
  k.step_size = static_cast<float>(double(hp.lr) / bc1);
  k.bias_correction2_sqrt = static_cast<float>(std::sqrt(bc2));
  k.decay_factor = 1.0f - hp.lr * hp.weight_decay;
  if (layout.n <= layout.begin) return;
  AdamWLayout L = layout;
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  L.vector_ok = L.begin % 4 == 0 && L.state_offset % 4 == 0 && aligned(master) && aligned(m) &&
                aligned(v) && aligned(grads);
  const int64_t threads_needed = ceil_div(L.n - L.begin, 4);
  const unsigned blocks = static_cast<unsigned>(ceil_div(threads_needed, 256));
  dispatch_dtype(t, [&](auto tag) {
    using X = decltype(tag);
    adamw_kernel<X><<<blocks, 256, 0, s>>>(master, static_cast<X*>(work), grads, m, v, L, k);
    AISCALE_CUDA_LAUNCH_CHECK();
  });
}

size_t sum_squares_scratch_doubles() { return kSumBlocks; }

void sum_squares(double* out, const float* x, int64_t n, double* scratch, cudaStream_t s) {
  sum_squares_partial_kernel<<<kSumBlocks, kSumThreads, 0, s>>>(scratch, x, n);
  AISCALE_CUDA_LAUNCH_CHECK();
  sum_squares_final_kernel<<<1, 32, 0, s>>>(out, scratch, kSumBlocks);
  AISCALE_CUDA_LAUNCH_CHECK();
}

}  // namespace aiscale::cuda
