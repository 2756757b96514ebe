// Fused softmax + cross-entropy over the vocabulary: one block per row reads the logits
// once for the log-sum-exp (online max / sum per thread, then a block reduction) and a
// second time (mostly from L2) to write dlogits in place: two passes over a (N, Vp) matrix
// instead of the five of softmax, loss, and softmax backward done apart.
#include <cfloat>
#include <type_traits>

#include "aiscale/ops/cuda/common.cuh"
#include "aiscale/ops/cuda/cuda_ops.cuh"

namespace aiscale::cuda {
namespace {

constexpr int kXentThreads = 512;
constexpr int kUnroll = 4;

__device__ __forceinline__ void combine(float& m, float& s, float m2, float s2) {
  const float mx = fmaxf(m, m2);
  s = s * __expf(m - mx) + s2 * __expf(m2 - mx);
  m = mx;
}

// The block's (max, sum of exp) pairs combined into every thread's (m, s).
__device__ __forceinline__ void block_combine(float& m, float& s, float* red_m, float* red_s) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    combine(m, s, __shfl_xor_sync(0xffffffffu, m, o), __shfl_xor_sync(0xffffffffu, s, o));
  if (lane == 0) {
    red_m[warp] = m;
    red_s[warp] = s;
  }
  __syncthreads();
  if (warp == 0) {
    m = lane < kXentThreads / 32 ? red_m[lane] : -FLT_MAX;
    s = lane < kXentThreads / 32 ? red_s[lane] : 0.0f;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
      combine(m, s, __shfl_xor_sync(0xffffffffu, m, o), __shfl_xor_sync(0xffffffffu, s, o));
    if (lane == 0) {
      red_m[0] = m;
      red_s[0] = s;
    }
  }
  __syncthreads();
  m = red_m[0];
  s = red_s[0];
}

// Pack p of a row (its first column p * PV) combined into the running (m, s): its max and
// sum of exp over the columns below V (the padded ones left out).
template <typename T>
__device__ __forceinline__ void combine_pack(float& m, float& s, const Pack<T>& v, int p, int V) {
  constexpr int PV = Pack<T>::N;
  float pm = -FLT_MAX;
#pragma unroll
  for (int k = 0; k < PV; ++k)
    if (p * PV + k < V) pm = fmaxf(pm, v.get(k));
  float ps = 0.0f;
#pragma unroll
  for (int k = 0; k < PV; ++k)
    if (p * PV + k < V) ps += __expf(v.get(k) - pm);
  combine(m, s, pm, ps);
}

template <typename T>
__global__ void __launch_bounds__(kXentThreads)
    softmax_xent_kernel(float* losses, T* logits, const int32_t* targets, int V, int Vp,
                        float dscale, bool write_grad) {
  constexpr int PV = Pack<T>::N;
  __shared__ float red_m[32], red_s[32];
  const int64_t row = blockIdx.x;
  T* x = logits + row * Vp;
  const int packs = Vp / PV;

  // Pass 1: per-thread running max and sum of exp over its packs.
  float m = -FLT_MAX, s = 0.0f;
  const int first = threadIdx.x, stride = kXentThreads;
  strided_loads<kUnroll>(
      first, packs, stride, [&](int p) { return load_pack(x + int64_t(p) * PV); },
      [&](int p, const Pack<T>& v) { combine_pack(m, s, v, p, V); });
  block_combine(m, s, red_m, red_s);
  const float lse = m + __logf(s);
  const int target = targets[row];
  if (threadIdx.x == 0) losses[row] = lse - to_f32<T>(x[target]);
  if (!write_grad) return;
  __syncthreads();  // the target logit is read above before any thread overwrites it

  // Pass 2: dlogits = dscale * (softmax - onehot), in place; padded columns get 0.
  strided_loads<kUnroll>(
      first, packs, stride, [&](int p) { return load_pack_cs(x + int64_t(p) * PV); },
      [&](int p, const Pack<T>& v) {
        Pack<T> d;
#pragma unroll
        for (int k = 0; k < PV; ++k) {
          const int col = p * PV + k;
          float g = 0.0f;
          if (col < V) g = dscale * (__expf(v.get(k) - lse) - (col == target ? 1.0f : 0.0f));
          d.set(k, g);
        }
        store_pack(x + int64_t(p) * PV, d);
      });
}

// The row held in registers (NP packs per thread): one read of the logits from memory,
// one write of dlogits. Used when the padded row fits (NP <= 16: a 65k vocabulary in
// bf16); the kernel above is the general path.
template <typename T, int NP>
__global__ void __launch_bounds__(kXentThreads)
    softmax_xent_reg_kernel(float* losses, T* logits, const int32_t* targets, int V, int Vp,
                            float dscale, bool write_grad) {
  constexpr int PV = Pack<T>::N;
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  T* x = logits + row * Vp;
  const int packs = Vp / PV;
  Pack<T> v[NP];
#pragma unroll
  for (int u = 0; u < NP; ++u) {
    const int p = threadIdx.x + u * kXentThreads;
    if (p < packs) v[u] = load_pack_cs(x + int64_t(p) * PV);
  }
  float m = -FLT_MAX;
#pragma unroll
  for (int u = 0; u < NP; ++u) {
    const int p = threadIdx.x + u * kXentThreads;
#pragma unroll
    for (int k = 0; k < PV; ++k)
      if (p < packs && p * PV + k < V) m = fmaxf(m, v[u].get(k));
  }
  m = block_max(m, scratch);
  float sum = 0.0f;
#pragma unroll
  for (int u = 0; u < NP; ++u) {
    const int p = threadIdx.x + u * kXentThreads;
#pragma unroll
    for (int k = 0; k < PV; ++k)
      if (p < packs && p * PV + k < V) sum += __expf(v[u].get(k) - m);
  }
  sum = block_sum(sum, scratch);
  const float lse = m + __logf(sum);
  const int target = targets[row];
  // The thread holding the target logit writes the loss.
  {
    const int tp = target / PV;
    if (tp % kXentThreads == static_cast<int>(threadIdx.x)) {
      const int u = tp / kXentThreads;
      const int tk = target % PV;
      float xt = 0.0f;  // registers are indexed with constants only (else: local memory)
#pragma unroll
      for (int uu = 0; uu < NP; ++uu)
#pragma unroll
        for (int k = 0; k < PV; ++k)
          if (uu == u && k == tk) xt = v[uu].get(k);
      losses[row] = lse - xt;
    }
  }
  if (!write_grad) return;
#pragma unroll
  for (int u = 0; u < NP; ++u) {
    const int p = threadIdx.x + u * kXentThreads;
    if (p < packs) {
      Pack<T> d;
#pragma unroll
      for (int k = 0; k < PV; ++k) {
        const int col = p * PV + k;
        float gr = 0.0f;
        if (col < V) gr = dscale * (__expf(v[u].get(k) - lse) - (col == target ? 1.0f : 0.0f));
        d.set(k, gr);
      }
      store_pack(x + int64_t(p) * PV, d);
    }
  }
}

__global__ void mean_reduce_kernel(float* out, const float* x, int64_t n) {
  __shared__ float scratch[32];
  float s = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += x[i];
  s = block_sum(s, scratch);
  if (threadIdx.x == 0) out[0] = s / static_cast<float>(n);
}

template <typename T>
__global__ void logits_row_kernel(float* out, const T* x, const T* w, int V, int C) {
  constexpr int PV = Pack<T>::N;
  const int lane = threadIdx.x % 32;
  const int v = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (v >= V) return;
  float acc = 0.0f;
  for (int c = lane * PV; c < C; c += 32 * PV) {
    const Pack<T> a = load_pack(x + c);
    const Pack<T> b = load_pack(w + int64_t(v) * C + c);
#pragma unroll
    for (int k = 0; k < PV; ++k) acc += a.get(k) * b.get(k);
  }
  acc = warp_sum(acc);
  if (lane == 0) out[v] = to_f32<T>(from_f32<T>(acc));
}

// A vocabulary slice's statistics of one row per block: (max, sum of exp(x - max)) over
// the real columns [0, V), and the target's logit where this slice holds it (else 0).
template <typename T>
__global__ void __launch_bounds__(kXentThreads)
    xent_stats_kernel(float* stats, const T* logits, const int32_t* targets, int V, int Vp,
                      int64_t vocab_begin) {
  constexpr int PV = Pack<T>::N;
  __shared__ float red_m[32], red_s[32];
  const int64_t row = blockIdx.x;
  const T* x = logits + row * Vp;
  const int packs = Vp / PV;
  float m = -FLT_MAX, s = 0.0f;
  for (int p = threadIdx.x; p < packs; p += kXentThreads)
    combine_pack(m, s, load_pack(x + int64_t(p) * PV), p, V);
  block_combine(m, s, red_m, red_s);
  if (threadIdx.x == 0) {
    const int64_t col = int64_t(targets[row]) - vocab_begin;
    stats[row * 3] = m;
    stats[row * 3 + 1] = s;
    stats[row * 3 + 2] = col >= 0 && col < V ? to_f32<T>(x[col]) : 0.0f;
  }
}

// Every rank's statistics of a row (all_stats: tp x N x 3) combined in rank order (the
// same on every rank): the loss, and with write_grad this slice's dlogits in place.
template <typename T>
__global__ void __launch_bounds__(kXentThreads)
    xent_split_kernel(float* losses, T* logits, const int32_t* targets, const float* all_stats,
                      int tp, int64_t N, int V, int Vp, int64_t vocab_begin, float dscale,
                      bool write_grad) {
  constexpr int PV = Pack<T>::N;
  const int64_t row = blockIdx.x;
  float m = -FLT_MAX, s = 0.0f, target_logit = 0.0f;
  for (int r = 0; r < tp; ++r) {
    const float* st = all_stats + (int64_t(r) * N + row) * 3;
    combine(m, s, st[0], st[1]);
    target_logit += st[2];  // one rank holds the target, the others add 0
  }
  const float lse = m + __logf(s);
  if (threadIdx.x == 0) losses[row] = lse - target_logit;
  if (!write_grad) return;
  T* x = logits + row * Vp;
  const int64_t target = int64_t(targets[row]) - vocab_begin;
  for (int p = threadIdx.x; p < Vp / PV; p += kXentThreads) {
    const Pack<T> v = load_pack_cs(x + int64_t(p) * PV);
    Pack<T> d;
#pragma unroll
    for (int k = 0; k < PV; ++k) {
      const int col = p * PV + k;
      float g = 0.0f;
      if (col < V) g = dscale * (__expf(v.get(k) - lse) - (col == target ? 1.0f : 0.0f));
      d.set(k, g);
    }
    store_pack(x + int64_t(p) * PV, d);
  }
}

}  // namespace

void softmax_xent(DType t, float* losses, void* logits, const int32_t* targets, int64_t N,
                  int64_t V, int64_t Vp, float dscale, bool write_grad, cudaStream_t s) {
  if (N <= 0) return;
  dispatch_dtype(t, [&](auto tag) {
    using X = decltype(tag);
    AISCALE_CUDA_REQUIRE(Vp % Pack<X>::N == 0 && Vp >= V, "softmax_xent: padded vocabulary " + std::to_string(Vp));
    const int64_t need = ceil_div(Vp / Pack<X>::N, kXentThreads);
    auto launch_reg = [&](auto np) {
      constexpr int NP = decltype(np)::value;
      softmax_xent_reg_kernel<X, NP><<<static_cast<unsigned>(N), kXentThreads, 0, s>>>(
          losses, static_cast<X*>(logits), targets, static_cast<int>(V), static_cast<int>(Vp),
          dscale, write_grad);
    };
    // The register-resident kernel holds one row per 512 threads at 128 registers: one
    // block per SM, and it measured 1.9 ms against the two-pass kernel's 1.1 (H200, 2026-11-26):
    // only for small vocabularies, where it fits in a few registers.
    if (need <= 1) launch_reg(std::integral_constant<int, 1>{});
    else if (need <= 2) launch_reg(std::integral_constant<int, 2>{});
    else
      softmax_xent_kernel<X><<<static_cast<unsigned>(N), kXentThreads, 0, s>>>(
          losses, static_cast<X*>(logits), targets, static_cast<int>(V), static_cast<int>(Vp),
          dscale, write_grad);
    AISCALE_CUDA_LAUNCH_CHECK();
  });
}

void softmax_xent_stats(DType t, float* stats, const void* logits, const int32_t* targets,
                        int64_t N, int64_t V, int64_t Vp, int64_t vocab_begin, cudaStream_t s) {
  if (N <= 0) return;
  dispatch_dtype(t, [&](auto tag) {
    using X = decltype(tag);
    AISCALE_CUDA_REQUIRE(Vp % Pack<X>::N == 0 && Vp >= V, "softmax_xent_stats: vocabulary slice " + std::to_string(Vp));
    xent_stats_kernel<X><<<static_cast<unsigned>(N), kXentThreads, 0, s>>>(
        stats, static_cast<const X*>(logits), targets, static_cast<int>(V), static_cast<int>(Vp),
        vocab_begin);
    AISCALE_CUDA_LAUNCH_CHECK();
  });
}

void softmax_xent_split(DType t, float* losses, void* logits, const int32_t* targets,
                        const float* all_stats, int tp, int64_t N, int64_t V, int64_t Vp,
                        int64_t vocab_begin, float dscale, bool write_grad, cudaStream_t s) {
  if (N <= 0) return;
  dispatch_dtype(t, [&](auto tag) {
    using X = decltype(tag);
    xent_split_kernel<X><<<static_cast<unsigned>(N), kXentThreads, 0, s>>>(
        losses, static_cast<X*>(logits), targets, all_stats, tp, N, static_cast<int>(V),
        static_cast<int>(Vp), vocab_begin, dscale, write_grad);
    AISCALE_CUDA_LAUNCH_CHECK();
  });
}

void mean_reduce(float* out, const float* x, int64_t n, cudaStream_t s) {
  mean_reduce_kernel<<<1, 1024, 0, s>>>(out, x, n);
  AISCALE_CUDA_LAUNCH_CHECK();
}

void logits_row(DType t, float* out, const void* x, const void* w, int64_t V, int64_t C,
                cudaStream_t s) {
  dispatch_dtype(t, [&](auto tag) {
    using X = decltype(tag);
    AISCALE_CUDA_REQUIRE(C % Pack<X>::N == 0, "logits_row: C = " + std::to_string(C));
    logits_row_kernel<X><<<static_cast<unsigned>(ceil_div(V, 8)), 256, 0, s>>>(
        out, static_cast<const X*>(x), static_cast<const X*>(w), static_cast<int>(V),
        static_cast<int>(C));
    AISCALE_CUDA_LAUNCH_CHECK();
  });
}

}  // namespace aiscale::cuda
