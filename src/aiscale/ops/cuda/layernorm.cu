// LayerNorm and RMSNorm forward and backward (one set of kernels: RMS = true drops the mean
// and the bias, y = x / sqrt(mean(x^2) + eps) * w, statistics in fp32).
//
// Forward: one warp per row, the row in registers (16-byte packs, NV packs per lane);
// weight and bias are loaded together with the row, so one memory round trip covers a row.
//
// Backward: one row is spread over WPR warps, one to a few 16-byte packs per thread, so a
// thread always handles the same few columns and keeps their dweight, dbias and
// column-sum accumulators in registers (24 floats for 8 columns). The two row sums meet in
// shared memory behind a named barrier of the row's warps only. G such row groups share a
// block; their accumulators meet in shared memory at the end, in a fixed order, and one
// fixed-order reduction over the blocks finishes: deterministic, no atomics. The rows
// arrive through cp.async into each thread's own shared-memory slots, 2 rows ahead.
#include <algorithm>

#include "aiscale/ops/cuda/common.cuh"
#include "aiscale/ops/cuda/cuda_ops.cuh"

namespace aiscale::cuda {
namespace {

constexpr float kEps = 1e-5f;
constexpr int kFwdWarps = 4;  // rows per block in forward
constexpr int kScratchRows = 4;  // the scratch holds partials for one block per 4 rows

template <typename T, int NV, bool RMS>
__global__ void __launch_bounds__(kFwdWarps * 32)
    layernorm_forward_kernel(T* __restrict__ out, float* __restrict__ mean,
                             float* __restrict__ rstd, const T* __restrict__ inp,
                             const T* __restrict__ weight, const T* __restrict__ bias, int N,
                             int C, float eps) {
  constexpr int V = Pack<T>::N;
  const int lane = threadIdx.x % 32;
  const int row = blockIdx.x * kFwdWarps + threadIdx.x / 32;
  if (row >= N) return;
  const int packs = C / V;
  const T* x_row = inp + int64_t(row) * C;
  Pack<T> x[NV], w[NV], b[NV];
#pragma unroll
  for (int i = 0; i < NV; ++i) {
    const int p = lane + i * 32;
    if (p < packs) {
      x[i] = load_pack(x_row + p * V);
      w[i] = load_pack(weight + p * V);
      if (!RMS) b[i] = load_pack(bias + p * V);
    }
  }
  float sum = 0.0f;
  if (!RMS) {
#pragma unroll
    for (int i = 0; i < NV; ++i) {
      const int p = lane + i * 32;
      if (p < packs) {
#pragma unroll
        for (int k = 0; k < V; ++k) sum += x[i].get(k);
      }
    }
  }
  const float m = RMS ? 0.0f : warp_sum(sum) / C;
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
  const float r = rsqrtf(warp_sum(sq) / C + eps);
  T* o_row = out + int64_t(row) * C;
#pragma unroll
  for (int i = 0; i < NV; ++i) {
    const int p = lane + i * 32;
    if (p < packs) {
      Pack<T> o;
#pragma unroll
      for (int k = 0; k < V; ++k)
        o.set(k, (x[i].get(k) - m) * r * w[i].get(k) + (RMS ? 0.0f : b[i].get(k)));
      store_pack(o_row + p * V, o);
    }
  }
  if (lane == 0) {
    if (!RMS) mean[row] = m;
    rstd[row] = r;
  }
}

// ---------------------------------------------------------------------------------------
// Backward

// Each thread copies its own 16-byte packs of the next rows into its own shared-memory
// slots (cp.async), S - 1 rows ahead, so the loads in flight cost no registers and need no
// barrier (a thread reads only what it copied itself).
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async4(void* smem, const void* gmem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(s), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Barrier of `threads` threads (a multiple of 32) under id 1..15 (0 is __syncthreads).
__device__ __forceinline__ void group_barrier(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// Shared-memory bytes per thread and stage: dout, inp and the old dinp packs, mean, rstd.
template <typename T, int NV>
constexpr int bwd_slot_bytes() {
  return 3 * NV * 16 + 8;
}
constexpr int kStages = 3;  // rows per thread in shared memory: this one and 2 ahead
// Row groups per block: about 12 warps (two blocks per SM), fewer when the stages would
// not fit in ~100 KB. (One block of 18 or 24 warps per SM, half the partials, with or
// without the row kept in registers across the barrier: ~2 us slower on an H200,
// 2026-11-26.)
template <typename T, int NV, int WPR>
constexpr int bwd_groups() {
  constexpr int by_warps = 12 / WPR;
  constexpr int by_smem = (100 * 1024) / (kStages * WPR * 32 * bwd_slot_bytes<T, NV>());
  return by_smem < 1 ? 1 : (by_smem < by_warps ? by_smem : by_warps);
}
// Two blocks per SM (80 registers) when a thread holds at most 8 columns.
template <typename T, int NV>
constexpr int bwd_min_blocks() {
  return NV * Pack<T>::N <= 8 ? 2 : 1;
}
template <typename T, int NV, int WPR>
size_t bwd_smem_bytes(int C) {
  constexpr int S = kStages;
  constexpr int G = bwd_groups<T, NV, WPR>(), threads = G * WPR * 32;
  const size_t stages = size_t(S) * threads * bwd_slot_bytes<T, NV>() + size_t(G) * 2 * WPR * 8;
  const size_t accs = size_t(G) * 3 * C * sizeof(float);
  return std::max(stages, accs);
}

// partials: (gridDim.x, 3, C) = per-block sums of dweight, dbias and the column sums of
// the final dinp. Thread t of a row group handles packs t, t + TPR, ... of every row of
// that group; S stages of rows in flight.
template <typename T, int NV, int WPR, bool RMS>
__global__ void __launch_bounds__(bwd_groups<T, NV, WPR>() * WPR * 32, bwd_min_blocks<T, NV>())
    layernorm_backward_rows_kernel(T* __restrict__ dinp, float* __restrict__ partials,
                                   const T* __restrict__ dout, const T* __restrict__ inp,
                                   const T* __restrict__ weight, const float* __restrict__ mean,
                                   const float* __restrict__ rstd, int N, int C,
                                   bool accumulate) {
  constexpr int V = Pack<T>::N, TPR = WPR * 32, G = bwd_groups<T, NV, WPR>(), S = kStages;
  constexpr int THREADS = G * TPR;
  // Loop: [S][3 NV][THREADS] packs, [S][2][THREADS] floats (mean, rstd), [G][2][WPR]
  // float2 row sums (double-buffered). After the loop: [G][3][C] accumulators.
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Pack<T>* slots = reinterpret_cast<Pack<T>*>(smem_raw);
  float* mr = reinterpret_cast<float*>(smem_raw + size_t(S) * 3 * NV * THREADS * 16);
  float2* red = reinterpret_cast<float2*>(mr + S * 2 * THREADS);
  const int tid = threadIdx.x;
  const int g = tid / TPR, t = tid % TPR, wg = t / 32, lane = tid % 32;
  const int packs = C / V;

  Pack<T> w[NV];
  float aw[NV][V], ab[NV][V], ac[NV][V];
#pragma unroll
  for (int i = 0; i < NV; ++i) {
    const int p = t + i * TPR;
    if (p < packs) w[i] = load_pack(weight + p * V);
#pragma unroll
    for (int k = 0; k < V; ++k) aw[i][k] = ab[i][k] = ac[i][k] = 0.0f;
  }

  const int stride = gridDim.x * G;
  const int first = blockIdx.x * G + g;
  auto slot = [&](int s, int j) { return slots + (s * 3 * NV + j) * THREADS + tid; };
  auto issue = [&](int row, int s) {
    if (row < N) {
      const int64_t base = int64_t(row) * C;
#pragma unroll
      for (int i = 0; i < NV; ++i) {
        const int p = t + i * TPR;
        if (p < packs) {
          cp_async16(slot(s, i), dout + base + p * V);
          cp_async16(slot(s, NV + i), inp + base + p * V);
          if (accumulate) cp_async16(slot(s, 2 * NV + i), dinp + base + p * V);
        }
      }
      if (!RMS) cp_async4(mr + (s * 2) * THREADS + tid, mean + row);
      cp_async4(mr + (s * 2 + 1) * THREADS + tid, rstd + row);
    }
    cp_async_commit();
  };
#pragma unroll
  for (int s = 0; s < S - 1; ++s) issue(first + s * stride, s);

  int sc = 0, buf = 0;
  for (int row = first; row < N; row += stride) {
    issue(row + (S - 1) * stride, sc == 0 ? S - 1 : sc - 1);
    cp_async_wait<S - 1>();  // this row's copies (this thread's own) have landed
    const float m = RMS ? 0.0f : mr[(sc * 2) * THREADS + tid];
    const float r = mr[(sc * 2 + 1) * THREADS + tid];
    float s_dn = 0.0f, s_dnx = 0.0f;
#pragma unroll
    for (int i = 0; i < NV; ++i) {
      const int p = t + i * TPR;
      if (p < packs) {
        const Pack<T> dy = *slot(sc, i), x = *slot(sc, NV + i);
#pragma unroll
        for (int k = 0; k < V; ++k) {
          const float dn = dy.get(k) * w[i].get(k);
          s_dn += dn;
          s_dnx += dn * (x.get(k) - m) * r;
        }
      }
    }
    s_dn = warp_sum(s_dn);
    s_dnx = warp_sum(s_dnx);
    if (WPR > 1) {
      float2* rb = red + (g * 2 + buf) * WPR;
      if (lane == 0) rb[wg] = make_float2(s_dn, s_dnx);
      group_barrier(1 + g, TPR);
      s_dn = 0.0f;
      s_dnx = 0.0f;
#pragma unroll
      for (int w2 = 0; w2 < WPR; ++w2) {
        const float2 v = rb[w2];
        s_dn += v.x;
        s_dnx += v.y;
      }
      buf ^= 1;  // the next row writes the other buffer: no second barrier needed
    }
    const float mean_dn = s_dn / C, mean_dn_xhat = s_dnx / C;
    const int64_t base = int64_t(row) * C;
#pragma unroll
    for (int i = 0; i < NV; ++i) {
      const int p = t + i * TPR;
      if (p < packs) {
        const Pack<T> dy = *slot(sc, i), x = *slot(sc, NV + i);
        Pack<T> old;
        if (accumulate) old = *slot(sc, 2 * NV + i);
        Pack<T> o;
#pragma unroll
        for (int k = 0; k < V; ++k) {
          const float xhat = (x.get(k) - m) * r;
          const float gk = dy.get(k);
          // (RMSNorm: no mean was subtracted, so no mean_dn term.)
          const float dx = (gk * w[i].get(k) - (RMS ? 0.0f : mean_dn) - xhat * mean_dn_xhat) * r;
          o.set(k, accumulate ? old.get(k) + dx : dx);
          aw[i][k] += gk * xhat;
          ab[i][k] += gk;
          ac[i][k] += o.get(k);
        }
        store_pack(dinp + base + p * V, o);
      }
    }
    sc = sc + 1 == S ? 0 : sc + 1;
  }
  cp_async_wait<0>();
  __syncthreads();  // the stage buffers become the accumulators

  float* accs = reinterpret_cast<float*>(smem_raw);
  float* mine = accs + g * 3 * C;
#pragma unroll
  for (int i = 0; i < NV; ++i) {
    const int p = t + i * TPR;
    if (p < packs)
#pragma unroll
      for (int k = 0; k < V; ++k) {
        mine[p * V + k] = aw[i][k];
        mine[C + p * V + k] = ab[i][k];
        mine[2 * C + p * V + k] = ac[i][k];
      }
  }
  __syncthreads();
  for (int j = tid; j < 3 * C; j += THREADS) {
    float s = 0.0f;
#pragma unroll
    for (int gg = 0; gg < G; ++gg) s += accs[gg * 3 * C + j];
    partials[int64_t(blockIdx.x) * 3 * C + j] = s;
  }
}

// Sums the per-block partials (nparts, 3, C) in a fixed order and adds them to dweight,
// dbias and colsum. A block takes 32 of the 3C columns; its 16 warps split the parts (8
// loads in flight per thread) and meet in shared memory.
constexpr int kReduceWarps = 16;
__global__ void __launch_bounds__(kReduceWarps * 32)
    layernorm_backward_reduce_kernel(float* dweight, float* dbias, float* colsum,
                                     const float* __restrict__ partials, int nparts, int C) {
  __shared__ float sm[kReduceWarps][33];
  const int lane = threadIdx.x % 32, grp = threadIdx.x / 32;
  const int j = blockIdx.x * 32 + lane;  // column of (3, C)
  float s = 0.0f;
  if (j < 3 * C) {
#pragma unroll 8
    for (int p = grp; p < nparts; p += kReduceWarps) s += partials[int64_t(p) * 3 * C + j];
  }
  sm[grp][lane] = s;
  __syncthreads();
  if (grp != 0 || j >= 3 * C) return;
  float total = 0.0f;
#pragma unroll
  for (int k = 0; k < kReduceWarps; ++k) total += sm[k][lane];
  const int a = j / C, c = j % C;
  if (a == 0) dweight[c] += total;
  else if (a == 1) {
    if (dbias) dbias[c] += total;
  }
  else if (colsum) colsum[c] += total;
}

// Smallest instantiated NV >= need (forward).
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

// Backward shape for `packs` 16-byte packs per row: NV packs per thread (1, 2, 4 or 8),
// WPR warps per row (1..4).
template <typename F>
void dispatch_bwd_shape(int packs, F&& f) {
  const int need = static_cast<int>(ceil_div(packs, 128));
  auto with_nv = [&](auto nv) {
    constexpr int NV = decltype(nv)::value;
    const int wpr = static_cast<int>(ceil_div(packs, 32 * NV));
    if (wpr <= 1) f(nv, std::integral_constant<int, 1>{});
    else if (wpr == 2) f(nv, std::integral_constant<int, 2>{});
    else if (wpr == 3) f(nv, std::integral_constant<int, 3>{});
    else f(nv, std::integral_constant<int, 4>{});
  };
  if (need <= 1) with_nv(std::integral_constant<int, 1>{});
  else if (need <= 2) with_nv(std::integral_constant<int, 2>{});
  else if (need <= 4) with_nv(std::integral_constant<int, 4>{});
  else if (need <= 8) with_nv(std::integral_constant<int, 8>{});
  else throw Error("layernorm backward: " + std::to_string(packs) + " packs per row is too wide");
}

// Upper bound on the backward grid (the scratch holds 3C floats per block).
int backward_blocks(int64_t N) {
  return static_cast<int>(std::min<int64_t>(ceil_div(N, kScratchRows), 4 * sm_count()));
}

void set_smem(const void* kernel, size_t smem) {
  if (smem > 48 * 1024)
    AISCALE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(smem)));
}

}  // namespace

namespace {

template <bool RMS>
void norm_forward(DType t, void* out, float* mean, float* rstd, const void* inp,
                  const void* weight, const void* bias, int64_t N, int64_t C, float eps,
                  cudaStream_t s) {
  dispatch_dtype(t, [&](auto tag) {
    using X = decltype(tag);
    AISCALE_CUDA_REQUIRE(C % Pack<X>::N == 0, "layernorm: C = " + std::to_string(C));
    const int need = static_cast<int>(ceil_div(C / Pack<X>::N, 32));
    dispatch_nv(need, [&](auto nv) {
      constexpr int NV = decltype(nv)::value;
      const int blocks = static_cast<int>(ceil_div(N, kFwdWarps));
      layernorm_forward_kernel<X, NV, RMS><<<blocks, kFwdWarps * 32, 0, s>>>(
          static_cast<X*>(out), mean, rstd, static_cast<const X*>(inp),
          static_cast<const X*>(weight), static_cast<const X*>(bias), static_cast<int>(N),
          static_cast<int>(C), eps);
      AISCALE_CUDA_LAUNCH_CHECK();
    });
  });
}

template <bool RMS>
void norm_backward(DType t, void* dinp, float* dweight, float* dbias, float* dinp_colsum,
                   const void* dout, const void* inp, const void* weight, const float* mean,
                   const float* rstd, int64_t N, int64_t C, bool accumulate, float* scratch,
                   cudaStream_t s) {
  if (N == 0) return;
  dispatch_dtype(t, [&](auto tag) {
    using X = decltype(tag);
    AISCALE_CUDA_REQUIRE(C % Pack<X>::N == 0, "layernorm: C = " + std::to_string(C));
    const int packs = static_cast<int>(C / Pack<X>::N);
    int blocks = 0;
    dispatch_bwd_shape(packs, [&](auto nv, auto wpr) {
      constexpr int NV = decltype(nv)::value, WPR = decltype(wpr)::value;
      constexpr int G = bwd_groups<X, NV, WPR>(), threads = G * WPR * 32;
      auto kernel = layernorm_backward_rows_kernel<X, NV, WPR, RMS>;
      const size_t smem = bwd_smem_bytes<X, NV, WPR>(static_cast<int>(C));
      set_smem(reinterpret_cast<const void*>(kernel), smem);
      int per_sm = 0;
      AISCALE_CUDA_CHECK(
          cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem));
      AISCALE_CUDA_REQUIRE(per_sm > 0, "layernorm backward: C = " + std::to_string(C));
      blocks = static_cast<int>(std::min<int64_t>(
          {int64_t(per_sm) * sm_count(), ceil_div(N, G), int64_t(backward_blocks(N))}));
      kernel<<<blocks, threads, smem, s>>>(
          static_cast<X*>(dinp), scratch, static_cast<const X*>(dout),
          static_cast<const X*>(inp), static_cast<const X*>(weight), mean, rstd,
          static_cast<int>(N), static_cast<int>(C), accumulate);
      AISCALE_CUDA_LAUNCH_CHECK();
    });
    layernorm_backward_reduce_kernel<<<static_cast<int>(ceil_div(3 * C, 32)), kReduceWarps * 32, 0, s>>>(
        dweight, dbias, dinp_colsum, scratch, blocks, static_cast<int>(C));
    AISCALE_CUDA_LAUNCH_CHECK();
  });
}

}  // namespace

void layernorm_forward(DType t, void* out, float* mean, float* rstd, const void* inp,
                       const void* weight, const void* bias, int64_t N, int64_t C,
                       cudaStream_t s) {
  norm_forward<false>(t, out, mean, rstd, inp, weight, bias, N, C, kEps, s);
}

size_t layernorm_backward_scratch_floats(int64_t N, int64_t C) {
  return static_cast<size_t>(backward_blocks(N)) * 3 * static_cast<size_t>(C);
}

void layernorm_backward(DType t, void* dinp, float* dweight, float* dbias, float* dinp_colsum,
                        const void* dout, const void* inp, const void* weight,
                        const float* mean, const float* rstd, int64_t N, int64_t C,
                        bool accumulate, float* scratch, cudaStream_t s) {
  norm_backward<false>(t, dinp, dweight, dbias, dinp_colsum, dout, inp, weight, mean, rstd, N, C,
                       accumulate, scratch, s);
}

void rmsnorm_forward(DType t, void* out, float* rstd, const void* inp, const void* weight,
                     int64_t N, int64_t C, float eps, cudaStream_t s) {
  norm_forward<true>(t, out, nullptr, rstd, inp, weight, nullptr, N, C, eps, s);
}

void rmsnorm_backward(DType t, void* dinp, float* dweight, const void* dout, const void* inp,
                      const void* weight, const float* rstd, int64_t N, int64_t C,
                      bool accumulate, float* scratch, cudaStream_t s) {
  norm_backward<true>(t, dinp, dweight, nullptr, nullptr, dout, inp, weight, nullptr, rstd, N, C,
                      accumulate, scratch, s);
}

}  // namespace aiscale::cuda
