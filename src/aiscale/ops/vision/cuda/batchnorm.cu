// Batch norm over NHWC activations: the per-channel reductions (statistics in the forward,
// sum(g) and sum(g * xhat) in the backward) as one pass of blocks over (32-channel tile,
// block of rows) writing partial sums, then one thread per channel adding the partials in
// double in a fixed order (deterministic for a shape), then one elementwise pass. The
// ReLU and the residual add of a ResNet block ride in the elementwise passes, so a block's
// last batch norm, its add and its ReLU read and write every value once.
#include "aiscale/ops/cuda/common.cuh"
#include "aiscale/ops/vision/cuda/elementwise_vec.cuh"
#include "aiscale/ops/vision/cuda/vision_cuda.cuh"

namespace aiscale::cuda::vision {
namespace {

constexpr int kTile = 32;   // channels per block (one warp across a row)
constexpr int kLanes = 8;   // rows read side by side in a block

int64_t row_blocks(int64_t R, int64_t C) {
  const int64_t tiles = ceil_div(C, kTile);
  const int64_t cap = std::max<int64_t>(1, 2048 / tiles);
  return std::max<int64_t>(1, std::min(ceil_div(R, 64), cap));
}

// Partial sums over a block of rows: a[rb * C + c] = sum f(row, c), b likewise.
// Mode 0 (statistics): a = sum x, b = sum x^2. Mode 1 (backward): with g = dy (masked by
// y > 0 when relu), a = sum g, b = sum g * (x - mean).
template <typename T, int Mode>
__global__ void partial_sums(float* a_out, float* b_out, const T* __restrict__ x,
                             const T* __restrict__ dy, const T* __restrict__ y,
                             const float* __restrict__ mean, bool relu, int64_t R, int64_t C,
                             int64_t rows_per_block) {
  __shared__ float sa[kLanes][kTile], sb[kLanes][kTile];
  const int64_t c = int64_t(blockIdx.x) * kTile + threadIdx.x;
  const int64_t r0 = int64_t(blockIdx.y) * rows_per_block;
  const int64_t r1 = R < r0 + rows_per_block ? R : r0 + rows_per_block;
  float a = 0.f, b = 0.f;
  if (c < C) {
    const float m = Mode == 1 ? mean[c] : 0.f;
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kLanes) {
      const float v = to_f32<T>(x[r * C + c]);
      if constexpr (Mode == 0) {
        a += v;
        b += v * v;
      } else {
        float g = to_f32<T>(dy[r * C + c]);
        if (relu && !(to_f32<T>(y[r * C + c]) > 0.f)) g = 0.f;
        a += g;
        b += g * (v - m);
      }
    }
  }
  sa[threadIdx.y][threadIdx.x] = a;
  sb[threadIdx.y][threadIdx.x] = b;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    for (int l = 1; l < kLanes; ++l) {
      a += sa[l][threadIdx.x];
      b += sb[l][threadIdx.x];
    }
    a_out[int64_t(blockIdx.y) * C + c] = a;
    b_out[int64_t(blockIdx.y) * C + c] = b;
  }
}

template <typename T, int Mode>
void launch_partials(float* scratch, int64_t rb, const T* x, const T* dy, const T* y,
                     const float* mean, bool relu, int64_t R, int64_t C, cudaStream_t s) {
  const int64_t rows = ceil_div(R, rb);
  dim3 grid(unsigned(ceil_div(C, kTile)), unsigned(rb)), block(kTile, kLanes);
  partial_sums<T, Mode><<<grid, block, 0, s>>>(scratch, scratch + rb * C, x, dy, y, mean, relu,
                                               R, C, rows);
  AISCALE_CUDA_LAUNCH_CHECK();
}

// The partials of channel c summed in double by the kLanes threads of a column of a
// (kTile, kLanes) block, in a fixed order; the totals land in thread y = 0. Returns false
// for the threads that have nothing more to do.
__device__ __forceinline__ bool sum_partials(const float* pa, const float* pb, int64_t rb,
                                             int64_t C, int64_t c, double& a, double& b) {
  __shared__ double sa[kLanes][kTile], sb[kLanes][kTile];
  a = 0, b = 0;
  if (c < C) {
    for (int64_t i = threadIdx.y; i < rb; i += kLanes) {
      a += pa[i * C + c];
      b += pb[i * C + c];
    }
  }
  sa[threadIdx.y][threadIdx.x] = a;
  sb[threadIdx.y][threadIdx.x] = b;
  __syncthreads();
  if (threadIdx.y != 0 || c >= C) return false;
  for (int l = 1; l < kLanes; ++l) {
    a += sa[l][threadIdx.x];
    b += sb[l][threadIdx.x];
  }
  return true;
}

__global__ void stats_finalize(float* mean, float* rstd, float* scale, float* shift,
                               float* running_mean, float* running_var, const float* gamma,
                               const float* beta, const float* pa, const float* pb, int64_t rb,
                               int64_t R, int64_t C, float eps, float momentum) {
  const int64_t c = int64_t(blockIdx.x) * kTile + threadIdx.x;
  double s, q;
  if (!sum_partials(pa, pb, rb, C, c, s, q)) return;
  const double count = double(R);
  const double m = s / count;
  const double var = fmax(q / count - m * m, 0.0);
  const float r = float(1.0 / sqrt(var + double(eps)));
  mean[c] = float(m);
  rstd[c] = r;
  const float k = gamma[c] * r;
  scale[c] = k;
  shift[c] = beta[c] - float(m) * k;
  if (running_mean) {
    const double unbiased = count > 1 ? var * count / (count - 1) : var;
    running_mean[c] = float((1.0 - momentum) * running_mean[c] + momentum * m);
    running_var[c] = float((1.0 - momentum) * running_var[c] + momentum * unbiased);
  }
}

__global__ void eval_coefficients(float* scale, float* shift, const float* running_mean,
                                  const float* running_var, const float* gamma,
                                  const float* beta, int64_t C, float eps) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const float k = gamma[c] / sqrtf(running_var[c] + eps);
  scale[c] = k;
  shift[c] = beta[c] - running_mean[c] * k;
}

// Backward reductions -> parameter gradients and the dx coefficients:
// dx = k g - m1 - (x - mean) m2 with k = gamma rstd, m1 = k sum(g) / R,
// m2 = k rstd^2 sum(g (x - mean)) / R.
__global__ void backward_finalize(float* dgamma, float* dbeta, float* m1, float* m2,
                                  const float* rstd, const float* gamma, const float* pa,
                                  const float* pb, int64_t rb, int64_t R, int64_t C) {
  const int64_t c = int64_t(blockIdx.x) * kTile + threadIdx.x;
  double sg, sgx;
  if (!sum_partials(pa, pb, rb, C, c, sg, sgx)) return;
  const double r = rstd[c];
  dbeta[c] += float(sg);
  dgamma[c] += float(sgx * r);
  const double k = double(gamma[c]) * r;
  m1[c] = float(k * sg / double(R));
  m2[c] = float(k * r * r * sgx / double(R));
}

// The elementwise passes index with I: 32-bit below 2^30 values (so i + stride cannot
// overflow), since the channel of a value is i % C, a division per vector.
template <typename T, int V, typename I>
__global__ void apply_kernel(T* y, const T* x, const T* z, const float* scale,
                             const float* shift, I total, I C, bool relu) {
  const I stride = I(gridDim.x) * I(blockDim.x) * V;
  for (I i = (I(blockIdx.x) * I(blockDim.x) + I(threadIdx.x)) * V; i < total; i += stride) {
    const I c0 = i % C;
    float v[V], w[V];
    load_vec<T, V>(x + i, v);
    if (z) load_vec<T, V>(z + i, w);
#pragma unroll
    for (int j = 0; j < V; ++j) {
      float o = v[j] * scale[c0 + j] + shift[c0 + j];
      if (z) o += w[j];
      v[j] = relu ? fmaxf(o, 0.f) : o;
    }
    store_vec<T, V>(y + i, v);
  }
}

template <typename T, int V, typename I>
__global__ void backward_apply(T* dx, T* dz, const T* dy, const T* y, const T* x,
                               const float* mean, const float* rstd, const float* gamma,
                               const float* m1, const float* m2, I total, I C, bool relu,
                               bool acc_dx, bool acc_dz) {
  const I stride = I(gridDim.x) * I(blockDim.x) * V;
  for (I i = (I(blockIdx.x) * I(blockDim.x) + I(threadIdx.x)) * V; i < total; i += stride) {
    const I c0 = i % C;
    float g[V], yv[V], xv[V], o[V];
    load_vec<T, V>(dy + i, g);
    if (relu) {
      load_vec<T, V>(y + i, yv);
#pragma unroll
      for (int j = 0; j < V; ++j) g[j] = yv[j] > 0.f ? g[j] : 0.f;
    }
    if (dz) {
      if (acc_dz) {
        load_vec<T, V>(dz + i, o);
#pragma unroll
        for (int j = 0; j < V; ++j) o[j] += g[j];
        store_vec<T, V>(dz + i, o);
      } else {
        store_vec<T, V>(dz + i, g);
      }
    }
    if (dx) {
      load_vec<T, V>(x + i, xv);
      if (acc_dx) load_vec<T, V>(dx + i, o);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const I c = c0 + j;
        const float d = gamma[c] * rstd[c] * g[j] - m1[c] - (xv[j] - mean[c]) * m2[c];
        o[j] = acc_dx ? o[j] + d : d;
      }
      store_vec<T, V>(dx + i, o);
    }
  }
}

unsigned channel_blocks(int64_t C) { return unsigned(ceil_div(C, 256)); }
unsigned tile_blocks(int64_t C) { return unsigned(ceil_div(C, kTile)); }

}  // namespace

int64_t batchnorm_scratch_floats(int64_t R, int64_t C) {
  return 2 * row_blocks(R, C) * C + 2 * C;
}

void batchnorm_stats(DType t, float* mean, float* rstd, float* scale, float* shift,
                     float* running_mean, float* running_var, const void* x, const float* gamma,
                     const float* beta, int64_t R, int64_t C, float eps, float momentum,
                     float* scratch, cudaStream_t s) {
  const int64_t rb = row_blocks(R, C);
  dispatch_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    launch_partials<T, 0>(scratch, rb, static_cast<const T*>(x), nullptr, nullptr, nullptr,
                          false, R, C, s);
  });
  stats_finalize<<<tile_blocks(C), dim3(kTile, kLanes), 0, s>>>(
      mean, rstd, scale, shift, running_mean, running_var, gamma, beta, scratch, scratch + rb * C,
      rb, R, C, eps, momentum);
  AISCALE_CUDA_LAUNCH_CHECK();
}

void batchnorm_eval_coefficients(float* scale, float* shift, const float* running_mean,
                                 const float* running_var, const float* gamma, const float* beta,
                                 int64_t C, float eps, cudaStream_t s) {
  eval_coefficients<<<channel_blocks(C), 256, 0, s>>>(scale, shift, running_mean, running_var,
                                                      gamma, beta, C, eps);
  AISCALE_CUDA_LAUNCH_CHECK();
}

void batchnorm_apply(DType t, void* y, const void* x, const void* z, const float* scale,
                     const float* shift, int64_t R, int64_t C, bool relu, cudaStream_t s) {
  dispatch_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    launch_vec<T>(C, R * C, s, [&](auto v, unsigned grid, unsigned block) {
      constexpr int V = decltype(v)::value;
      if (R * C < (int64_t{1} << 30)) {
        apply_kernel<T, V, int32_t><<<grid, block, 0, s>>>(
            static_cast<T*>(y), static_cast<const T*>(x), static_cast<const T*>(z), scale, shift,
            int32_t(R * C), int32_t(C), relu);
      } else {
        apply_kernel<T, V, int64_t><<<grid, block, 0, s>>>(
            static_cast<T*>(y), static_cast<const T*>(x), static_cast<const T*>(z), scale, shift,
            R * C, C, relu);
      }
    });
  });
  AISCALE_CUDA_LAUNCH_CHECK();
}

void batchnorm_backward(DType t, void* dx, void* dz, float* dgamma, float* dbeta,
                        const void* dy, const void* y, const void* x, const float* mean,
                        const float* rstd, const float* gamma, int64_t R, int64_t C, bool relu,
                        bool accumulate_dx, bool accumulate_dz, float* scratch, cudaStream_t s) {
  const int64_t rb = row_blocks(R, C);
  float* m1 = scratch + 2 * rb * C;
  float* m2 = m1 + C;
  dispatch_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    launch_partials<T, 1>(scratch, rb, static_cast<const T*>(x), static_cast<const T*>(dy),
                          static_cast<const T*>(y), mean, relu, R, C, s);
  });
  backward_finalize<<<tile_blocks(C), dim3(kTile, kLanes), 0, s>>>(
      dgamma, dbeta, m1, m2, rstd, gamma, scratch, scratch + rb * C, rb, R, C);
  AISCALE_CUDA_LAUNCH_CHECK();
  dispatch_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    launch_vec<T>(C, R * C, s, [&](auto v, unsigned grid, unsigned block) {
      constexpr int V = decltype(v)::value;
      auto run = [&](auto index) {
        using I = decltype(index);
        backward_apply<T, V, I><<<grid, block, 0, s>>>(
            static_cast<T*>(dx), static_cast<T*>(dz), static_cast<const T*>(dy),
            static_cast<const T*>(y), static_cast<const T*>(x), mean, rstd, gamma, m1, m2,
            I(R * C), I(C), relu, accumulate_dx, accumulate_dz);
      };
      if (R * C < (int64_t{1} << 30)) run(int32_t{}); else run(int64_t{});
    });
  });
  AISCALE_CUDA_LAUNCH_CHECK();
}

}  // namespace aiscale::cuda::vision
