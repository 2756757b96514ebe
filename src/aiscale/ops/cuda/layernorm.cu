// LayerNorm forward and backward: one warp per row, the row held in registers (16-byte
// packs, NV packs per lane). Backward accumulates dweight, dbias and the column sums of
// its output in per-warp shared memory (no atomics), then one fixed-order reduction over
// the blocks: deterministic.
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "aiscale/ops/cuda/common.cuh"
#include "aiscale/ops/cuda/cuda_ops.cuh"

namespace aiscale::cuda {
namespace {

constexpr float kEps = 1e-5f;
constexpr int kFwdWarps = 4;  // rows per block in forward
constexpr int kBwdWarps = 4;  // warps per block in backward

template <typename T, int NV>
__global__ void __launch_bounds__(kFwdWarps * 32)
    layernorm_forward_kernel(T* out, float* mean, float* rstd, const T* inp, const T* weight,
                             const T* bias, int N, int C) {
  constexpr int V = Pack<T>::N;
  const int lane = threadIdx.x % 32;
  const int row = blockIdx.x * kFwdWarps + threadIdx.x / 32;
  if (row >= N) return;
  const int packs = C / V;
  const T* x_row = inp + int64_t(row) * C;
  Pack<T> x[NV];
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < NV; ++i) {
    const int p = lane + i * 32;
    if (p < packs) {
      x[i] = load_pack(x_row + p * V);
#pragma unroll
      for (int k = 0; k < V; ++k) sum += x[i].get(k);
    }
  }
  const float m = warp_sum(sum) / C;
  float sq = 0.0f;
#pragma unroll
  for (int i = 0; i < NV; ++i) {
    const int p = lane + i * 32;
    if (p < packs) {
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const float d = x[i].get(k) - m;
        sq += d * d;
      }
    }
  }
  const float r = rsqrtf(warp_sum(sq) / C + kEps);
  T* o_row = out + int64_t(row) * C;
#pragma unroll
  for (int i = 0; i < NV; ++i) {
    const int p = lane + i * 32;
    if (p < packs) {
      const Pack<T> w = load_pack(weight + p * V);
      const Pack<T> b = load_pack(bias + p * V);
      Pack<T> o;
#pragma unroll
      for (int k = 0; k < V; ++k) o.set(k, (x[i].get(k) - m) * r * w.get(k) + b.get(k));
      store_pack(o_row + p * V, o);
    }
  }
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = r;
  }
}

// partials: (gridDim.x, 3, C) = per-block sums of dweight, dbias and dinp column sums.
// Each lane always works on the same columns (packs lane, lane + 32, ...), so it can
// accumulate them in registers (REG_ACC) or in per-warp shared memory, element (pack p,
// lane-element k) at k * packs + p so that a warp's accesses hit consecutive banks.
template <typename T, int NV, bool REG_ACC>
__global__ void __launch_bounds__(kBwdWarps * 32)
    layernorm_backward_kernel(T* dinp, float* partials, const T* dout, const T* inp,
                              const T* weight, const float* mean, const float* rstd, int N,
                              int C, bool accumulate, bool want_colsum) {
  constexpr int V = Pack<T>::N;
  extern __shared__ float smem[];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int packs = C / V;
  float* acc = smem + warp * 3 * C;
  float racc[REG_ACC ? 3 : 1][REG_ACC ? NV : 1][V];
  if (REG_ACC) {
#pragma unroll
    for (int a = 0; a < (REG_ACC ? 3 : 1); ++a)
#pragma unroll
      for (int i = 0; i < (REG_ACC ? NV : 1); ++i)
#pragma unroll
        for (int k = 0; k < V; ++k) racc[a][i][k] = 0.0f;
  } else {
    for (int j = lane; j < 3 * C; j += 32) acc[j] = 0.0f;
    __syncwarp();
  }

  for (int row = blockIdx.x * kBwdWarps + warp; row < N; row += gridDim.x * kBwdWarps) {
    const int64_t base = int64_t(row) * C;
    Pack<T> dy[NV], x[NV], old[NV];
#pragma unroll
    for (int i = 0; i < NV; ++i) {
      const int p = lane + i * 32;
      if (p < packs) {
        dy[i] = load_pack_cs(dout + base + p * V);
        x[i] = load_pack(inp + base + p * V);
        if (accumulate) old[i] = load_pack(dinp + base + p * V);
      }
    }
    const float m = mean[row], r = rstd[row];
    float sum_dn = 0.0f, sum_dn_xhat = 0.0f;
#pragma unroll
    for (int i = 0; i < NV; ++i) {
      const int p = lane + i * 32;
      if (p < packs) {
        const Pack<T> w = load_pack(weight + p * V);
#pragma unroll
        for (int k = 0; k < V; ++k) {
          const float dn = dy[i].get(k) * w.get(k);
          sum_dn += dn;
          sum_dn_xhat += dn * (x[i].get(k) - m) * r;
        }
      }
    }
    const float mean_dn = warp_sum(sum_dn) / C;
    const float mean_dn_xhat = warp_sum(sum_dn_xhat) / C;
#pragma unroll
    for (int i = 0; i < NV; ++i) {
      const int p = lane + i * 32;
      if (p < packs) {
        const Pack<T> w = load_pack(weight + p * V);
        Pack<T> o;
#pragma unroll
        for (int k = 0; k < V; ++k) {
          const float xhat = (x[i].get(k) - m) * r;
          const float gk = dy[i].get(k);
          const float dx = (gk * w.get(k) - mean_dn - xhat * mean_dn_xhat) * r;
          o.set(k, accumulate ? old[i].get(k) + dx : dx);
          if (REG_ACC) {
            racc[0][REG_ACC ? i : 0][k] += gk * xhat;
            racc[REG_ACC ? 1 : 0][REG_ACC ? i : 0][k] += gk;
            if (want_colsum) racc[REG_ACC ? 2 : 0][REG_ACC ? i : 0][k] += o.get(k);
          } else {
            const int j = k * packs + p;
            acc[j] += gk * xhat;
            acc[C + j] += gk;
            if (want_colsum) acc[2 * C + j] += o.get(k);
          }
        }
        store_pack(dinp + base + p * V, o);
      }
    }
  }
  if (REG_ACC) {
#pragma unroll
    for (int i = 0; i < (REG_ACC ? NV : 1); ++i) {
      const int p = lane + i * 32;
      if (p < packs)
#pragma unroll
        for (int k = 0; k < V; ++k) {
          acc[k * packs + p] = racc[0][i][k];
          acc[C + k * packs + p] = racc[REG_ACC ? 1 : 0][i][k];
          acc[2 * C + k * packs + p] = racc[REG_ACC ? 2 : 0][i][k];
        }
    }
  }
  __syncthreads();
  for (int j = threadIdx.x; j < 3 * C; j += blockDim.x) {
    const int a = j / C, c = j % C;
    const int idx = a * C + (c % V) * packs + c / V;
    float s = 0.0f;
#pragma unroll
    for (int w = 0; w < kBwdWarps; ++w) s += smem[w * 3 * C + idx];
    partials[int64_t(blockIdx.x) * 3 * C + j] = s;
  }
}

// Sums the per-block partials (nparts, 3, C) in a fixed order and adds them to dweight,
// dbias and colsum. A block takes 32 of the 3C columns; its 8 warps split the parts and
// meet in shared memory (the serial version with one thread per column was latency-bound).
__global__ void __launch_bounds__(256)
    layernorm_backward_reduce_kernel(float* dweight, float* dbias, float* colsum,
                                     const float* partials, int nparts, int C) {
  __shared__ float sm[8][33];
  const int lane = threadIdx.x % 32, grp = threadIdx.x / 32;
  const int j = blockIdx.x * 32 + lane;  // column of (3, C)
  float s = 0.0f;
  if (j < 3 * C)
    for (int p = grp; p < nparts; p += 8) s += partials[int64_t(p) * 3 * C + j];
  sm[grp][lane] = s;
  __syncthreads();
  if (grp != 0 || j >= 3 * C) return;
  float total = 0.0f;
#pragma unroll
  for (int k = 0; k < 8; ++k) total += sm[k][lane];
  const int a = j / C, c = j % C;
  if (a == 0) dweight[c] += total;
  else if (a == 1) dbias[c] += total;
  else if (colsum) colsum[c] += total;
}

// Smallest instantiated NV >= need.
template <typename F>
void dispatch_nv(int need, F&& f) {
  if (need <= 1) f(std::integral_constant<int, 1>{});
  else if (need <= 2) f(std::integral_constant<int, 2>{});
  else if (need <= 3) f(std::integral_constant<int, 3>{});
  else if (need <= 4) f(std::integral_constant<int, 4>{});
  else if (need <= 6) f(std::integral_constant<int, 6>{});
  else if (need <= 8) f(std::integral_constant<int, 8>{});
  else if (need <= 12) f(std::integral_constant<int, 12>{});
  else if (need <= 16) f(std::integral_constant<int, 16>{});
  else throw Error("layernorm: width " + std::to_string(need) + " packs per lane is too wide");
}

int backward_blocks(int64_t N) {
  return static_cast<int>(std::min<int64_t>(ceil_div(N, kBwdWarps), 4 * sm_count()));
}

}  // namespace

void layernorm_forward(DType t, void* out, float* mean, float* rstd, const void* inp,
                       const void* weight, const void* bias, int64_t N, int64_t C,
                       cudaStream_t s) {
  dispatch_dtype(t, [&](auto tag) {
    using X = decltype(tag);
    AISCALE_CUDA_REQUIRE(C % Pack<X>::N == 0, "layernorm: C = " + std::to_string(C));
    const int need = static_cast<int>(ceil_div(C / Pack<X>::N, 32));
    dispatch_nv(need, [&](auto nv) {
      constexpr int NV = decltype(nv)::value;
      const int blocks = static_cast<int>(ceil_div(N, kFwdWarps));
      layernorm_forward_kernel<X, NV><<<blocks, kFwdWarps * 32, 0, s>>>(
          static_cast<X*>(out), mean, rstd, static_cast<const X*>(inp),
          static_cast<const X*>(weight), static_cast<const X*>(bias), static_cast<int>(N),
          static_cast<int>(C));
      AISCALE_CUDA_LAUNCH_CHECK();
    });
  });
}

size_t layernorm_backward_scratch_floats(int64_t N, int64_t C) {
  return static_cast<size_t>(backward_blocks(N)) * 3 * static_cast<size_t>(C);
}

void layernorm_backward(DType t, void* dinp, float* dweight, float* dbias, float* dinp_colsum,
                        const void* dout, const void* inp, const void* weight,
                        const float* mean, const float* rstd, int64_t N, int64_t C,
                        bool accumulate, float* scratch, cudaStream_t s) {
  dispatch_dtype(t, [&](auto tag) {
    using X = decltype(tag);
    AISCALE_CUDA_REQUIRE(C % Pack<X>::N == 0, "layernorm: C = " + std::to_string(C));
    const int need = static_cast<int>(ceil_div(C / Pack<X>::N, 32));
    const int blocks = backward_blocks(N);
    const size_t smem = size_t(kBwdWarps) * 3 * size_t(C) * sizeof(float);
    // Accumulators in registers (AISCALE_CUDA_LN_BWD=reg) or per-warp shared memory
    // (default): a measured choice, see docs/perf-notes.md.
    const char* variant = std::getenv("AISCALE_CUDA_LN_BWD");
    const bool reg_acc = variant && std::strcmp(variant, "reg") == 0 && need <= 4;
    dispatch_nv(need, [&](auto nv) {
      constexpr int NV = decltype(nv)::value;
      auto kernel = reg_acc ? layernorm_backward_kernel<X, NV, true> : layernorm_backward_kernel<X, NV, false>;
      if (smem > 48 * 1024)
        AISCALE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                static_cast<int>(smem)));
      kernel<<<blocks, kBwdWarps * 32, smem, s>>>(
          static_cast<X*>(dinp), scratch, static_cast<const X*>(dout), static_cast<const X*>(inp),
          static_cast<const X*>(weight), mean, rstd, static_cast<int>(N), static_cast<int>(C),
          accumulate, dinp_colsum != nullptr);
      AISCALE_CUDA_LAUNCH_CHECK();
    });
    layernorm_backward_reduce_kernel<<<static_cast<int>(ceil_div(3 * C, 32)), 256, 0, s>>>(
        dweight, dbias, dinp_colsum, scratch, blocks, static_cast<int>(C));
    AISCALE_CUDA_LAUNCH_CHECK();
  });
}

}  // namespace aiscale::cuda
