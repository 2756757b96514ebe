// The kernels of the GPT-2 decoder (gpt_cuda_decoder.cu, its one includer): embedding
// rows, the cache append, attention over the cache, and the few-rows linear layers with
// their LayerNorm fused in.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>

#include "aiscale/ops/cuda/common.cuh"
#include "aiscale/ops/cuda/cuda_ops.cuh"

namespace aiscale::nn {
namespace {

using cuda::bf16;

// Each row: (stream, position, token) as three int32.
constexpr int kRowInts = 3;

// out (R, C) = wte[token] + wpe[position], rounded once.
__global__ void embed_rows_kernel(bf16* out, const int32_t* rows, const bf16* wte,
                                  const bf16* wpe, int C) {
  const int r = blockIdx.x;
  const int64_t pos = rows[kRowInts * r + 1], tok = rows[kRowInts * r + 2];
  for (int c = threadIdx.x; c < C; c += blockDim.x)
    out[int64_t(r) * C + c] = __float2bfloat16(__bfloat162float(wte[tok * C + c]) +
                                               __bfloat162float(wpe[pos * C + c]));
}

// Each row's key and value (the middle and last thirds of its qkv row) into the cache at
// its stream and position.
__global__ void kv_append_kernel(bf16* k_cache, bf16* v_cache, const bf16* qkv,
                                 const int32_t* rows, int C, int NH, int HS, int T) {
  const int r = blockIdx.x;
  const int64_t s = rows[kRowInts * r], p = rows[kRowInts * r + 1];
  const bf16* src = qkv + int64_t(r) * 3 * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const int h = c / HS, d = c % HS;
    const int64_t at = ((s * NH + h) * T + p) * HS + d;
    k_cache[at] = src[C + c];
    v_cache[at] = src[2 * C + c];
  }
}

// out (R, C): for row r and head h (one block), softmax(q k_j / sqrt(HS)) over the
// stream's positions j = 0..position, times v_j. Eight warps take chunks of 32 positions in
// turn: in a chunk each lane scores one position (a whole dot product: independent loads,
// no reduction per position), the warp updates its online softmax once per chunk (running
// max, sum), and each lane accumulates its PER elements of the head from the chunk's 32
// value rows (read coalesced); warp 0 merges the eight. One row of 12 heads is only 12
// blocks: work per chunk, not per position, keeps a decoding step short.
// APPEND: the block first writes its row's key and value of head h into the cache (what
// kv_append_kernel does), one kernel less per layer; valid when no two rows share a stream
// (a decoding step), since a block reads only its own stream's positions.
template <int HS, bool APPEND>
__global__ void __launch_bounds__(256)
cached_attention_kernel(bf16* out, const bf16* qkv, bf16* k_cache, bf16* v_cache,
                        const int32_t* rows, int C, int NH, int T, float scale_log2) {
  constexpr int kWarps = 8;
  constexpr int PER = HS >= 32 ? HS / 32 : 1;
  const int r = blockIdx.x, h = blockIdx.y;
  const int64_t s = rows[kRowInts * r];
  const int p = rows[kRowInts * r + 1];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const bool active = lane * PER < HS;
  __shared__ float q[HS];
  const bf16* qrow = qkv + int64_t(r) * 3 * C + h * HS;
  for (int d = threadIdx.x; d < HS; d += blockDim.x) q[d] = __bfloat162float(qrow[d]) * scale_log2;
  if constexpr (APPEND) {
    const int64_t at = ((s * NH + h) * T + p) * HS;
    for (int d = threadIdx.x; d < HS; d += blockDim.x) {
      k_cache[at + d] = qrow[C + d];
      v_cache[at + d] = qrow[2 * C + d];
    }
  }
  __syncthreads();  // q, and with APPEND this position's key and value, for every warp
  const bf16* kb = k_cache + (s * NH + h) * T * HS;
  const bf16* vb = v_cache + (s * NH + h) * T * HS;
  float m = -INFINITY, l = 0.0f, acc[PER];
#pragma unroll
  for (int i = 0; i < PER; ++i) acc[i] = 0.0f;
  for (int base = warp * 32; base <= p; base += kWarps * 32) {
    const int j = base + lane;
    float score = -INFINITY;
    if (j <= p) {  // the key row in 16-byte pieces, all loads issued before the sums
      const uint4* k4 = reinterpret_cast<const uint4*>(kb + int64_t(j) * HS);
      uint4 kv[HS / 8];
#pragma unroll
      for (int c = 0; c < HS / 8; ++c) kv[c] = k4[c];
      float dot = 0.0f;
#pragma unroll
      for (int c = 0; c < HS / 8; ++c) {
        const __nv_bfloat162* k2 = reinterpret_cast<const __nv_bfloat162*>(&kv[c]);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float2 f = __bfloat1622float2(k2[e]);
          dot += q[8 * c + 2 * e] * f.x + q[8 * c + 2 * e + 1] * f.y;
        }
      }
      score = dot;
    }
    float chunk_max = score;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) chunk_max = fmaxf(chunk_max, __shfl_xor_sync(0xffffffffu, chunk_max, o));
    const float m_new = fmaxf(m, chunk_max);
    const float corr = exp2f(m - m_new);
    const float pj = j <= p ? exp2f(score - m_new) : 0.0f;
    float chunk_sum = pj;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) chunk_sum += __shfl_xor_sync(0xffffffffu, chunk_sum, o);
    l = l * corr + chunk_sum;
#pragma unroll
    for (int i = 0; i < PER; ++i) acc[i] *= corr;
    // The chunk's value rows, 8 at a time with their loads in flight together (rows past
    // the position are not read: the cache holds no value there yet).
    const int n = min(32, p - base + 1);
    for (int i0 = 0; i0 < n; i0 += 8) {
      float w[8], vv[8][PER];
#pragma unroll
      for (int u = 0; u < 8; ++u) {
        w[u] = __shfl_sync(0xffffffffu, pj, i0 + u);
        const bool row = active && i0 + u < n;
        const bf16* vrow = vb + int64_t(base + i0 + u) * HS + lane * PER;
#pragma unroll
        for (int e = 0; e < PER; ++e) vv[u][e] = row ? __bfloat162float(vrow[e]) : 0.0f;
      }
#pragma unroll
      for (int u = 0; u < 8; ++u) {
#pragma unroll
        for (int e = 0; e < PER; ++e) acc[e] += w[u] * vv[u][e];
      }
    }
    m = m_new;
  }
  __shared__ float sm[kWarps], sl[kWarps], sacc[kWarps][HS];
  if (lane == 0) sm[warp] = m, sl[warp] = l;
  if (active) {
#pragma unroll
    for (int i = 0; i < PER; ++i) sacc[warp][lane * PER + i] = acc[i];
  }
  __syncthreads();
  if (warp != 0 || !active) return;
  float M = -INFINITY;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) M = fmaxf(M, sm[w]);
  float L = 0.0f, scale[kWarps];
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    scale[w] = sl[w] > 0.0f ? exp2f(sm[w] - M) : 0.0f;  // a warp without positions adds 0
    L += sl[w] * scale[w];
  }
  bf16* orow = out + int64_t(r) * C + h * HS;
#pragma unroll
  for (int i = 0; i < PER; ++i) {
    float o = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) o += sacc[w][lane * PER + i] * scale[w];
    orow[lane * PER + i] = __float2bfloat16(o / L);
  }
}

// A linear layer of a few rows, which a decoding step of a few streams is: out (R, OC) =
// in (R, C) @ w (OC, C)^T + bias [+ residual (R, OC)], or with pre non-null pre = that and
// out = gelu(pre) (tanh form, as the training kernels). A matrix-vector product streams the
// weights (a GEMM kernel for R = 1 spends most of its time on its tiles): each weight row is
// read once in 16-byte pieces, four pieces in flight per lane, and R sums are kept. A block
// of 8 warps serves 8 / KS output channels at a time, KS warps a channel, each over its
// slice of C (KS > 1 where there are too few channels to fill the GPU with one warp each);
// the slices' sums meet in shared memory in a fixed order. Blocks step over the channels.
//
// NORM: `in` is the residual stream and the layer's input is its LayerNorm (ln_w, ln_b;
// statistics in fp32, rounded once to bf16 as the training kernel does): each block first
// normalises the R rows (row i of `in` is in_index[i] where in_index is non-null: the rows
// whose logits are wanted) into shared memory, one warp a row, so no separate LayerNorm
// kernel runs and no normalised copy goes through global memory.
//
// C is a multiple of 8 (make_cuda_gpt_decoder checks n_embd). Out may be the residual (each
// element read and written by the one thread that owns it); out is never `in` when NORM.
// OutT: bf16, or fp32 (the logits).
constexpr int kFewRows = 8;
constexpr int kFewRowsWarps = 8;
constexpr int kPiecesInFlight = 4;

__device__ __forceinline__ float gelu_tanh(float v) {
  const float u = 0.7978845608028654f * (v + 0.044715f * v * v * v);  // sqrt(2/pi) (...)
  return 0.5f * v * (1.0f + tanhf(u));
}

// The sum over a warp of f(x) for the C bf16 values x of `row`, on every lane.
template <typename F>
__device__ __forceinline__ float warp_row_sum(const bf16* row, int C, int lane, F&& f) {
  float sum = 0.0f;
  for (int k = lane * 8; k < C; k += 32 * 8) {
    const uint4 xv = *reinterpret_cast<const uint4*>(row + k);
    const __nv_bfloat162* x2 = reinterpret_cast<const __nv_bfloat162*>(&xv);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float2 a = __bfloat1622float2(x2[e]);
      sum += f(a.x) + f(a.y);
    }
  }
  return cuda::warp_sum(sum);
}

// Row `row` of `in` LayerNormed into `dst` (C bf16) by one warp.
__device__ __forceinline__ void layernorm_row_to(bf16* dst, const bf16* row, const bf16* ln_w,
                                                 const bf16* ln_b, int C, int lane) {
  const float m = warp_row_sum(row, C, lane, [](float x) { return x; }) / C;
  const float var = warp_row_sum(row, C, lane, [m](float x) { return (x - m) * (x - m); }) / C;
  const float r = rsqrtf(var + 1e-5f);
  for (int k = lane * 8; k < C; k += 32 * 8) {
    const uint4 xv = *reinterpret_cast<const uint4*>(row + k);
    const uint4 wv = *reinterpret_cast<const uint4*>(ln_w + k);
    const uint4 bv = *reinterpret_cast<const uint4*>(ln_b + k);
    const __nv_bfloat162* x2 = reinterpret_cast<const __nv_bfloat162*>(&xv);
    const __nv_bfloat162* w2 = reinterpret_cast<const __nv_bfloat162*>(&wv);
    const __nv_bfloat162* b2 = reinterpret_cast<const __nv_bfloat162*>(&bv);
    uint4 ov;
    __nv_bfloat162* o2 = reinterpret_cast<__nv_bfloat162*>(&ov);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float2 a = __bfloat1622float2(x2[e]), g = __bfloat1622float2(w2[e]),
                   b = __bfloat1622float2(b2[e]);
      o2[e] = __floats2bfloat162_rn((a.x - m) * r * g.x + b.x, (a.y - m) * r * g.y + b.y);
    }
    *reinterpret_cast<uint4*>(dst + k) = ov;
  }
}

template <int R, int KS, typename OutT, bool NORM>
__global__ void __launch_bounds__(kFewRowsWarps * 32)
few_rows_linear_kernel(OutT* out, bf16* pre, const bf16* in, const int32_t* in_index,
                       const bf16* ln_w, const bf16* ln_b, const bf16* w, const bf16* bias,
                       const bf16* residual, int C, int OC) {
  constexpr int CH = kFewRowsWarps / KS;  // channels a block serves at a time
  extern __shared__ uint4 few_rows_shared[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const bf16* x = in;
  if constexpr (NORM) {
    bf16* xs = reinterpret_cast<bf16*>(few_rows_shared);
    if (warp < R)
      layernorm_row_to(xs + int64_t(warp) * C, in + int64_t(in_index ? in_index[warp] : warp) * C,
                       ln_w, ln_b, C, lane);
    __syncthreads();
    x = xs;
  }
  // The slice of C this warp sums over: multiples of 8 elements.
  const int slice = ((C + KS * 8 - 1) / (KS * 8)) * 8;
  const int k_begin = (warp / CH) * slice, k_end = min(C, k_begin + slice);
  constexpr int kStep = 32 * 8;
  for (int group = blockIdx.x; group * CH < OC; group += gridDim.x) {
    const int o = group * CH + warp % CH;
    float acc[R];
#pragma unroll
    for (int r = 0; r < R; ++r) acc[r] = 0.0f;
    if (o < OC) {
      const bf16* wrow = w + int64_t(o) * C;
      for (int k0 = k_begin + lane * 8; k0 < k_end; k0 += kPiecesInFlight * kStep) {
        uint4 wv[kPiecesInFlight];
#pragma unroll
        for (int u = 0; u < kPiecesInFlight; ++u)
          if (k0 + u * kStep < k_end) wv[u] = __ldcs(reinterpret_cast<const uint4*>(wrow + k0 + u * kStep));
#pragma unroll
        for (int u = 0; u < kPiecesInFlight; ++u) {
          const int k = k0 + u * kStep;
          if (k >= k_end) break;
          const __nv_bfloat162* w2 = reinterpret_cast<const __nv_bfloat162*>(&wv[u]);
#pragma unroll
          for (int r = 0; r < R; ++r) {
            const uint4 xv = *reinterpret_cast<const uint4*>(x + int64_t(r) * C + k);
            const __nv_bfloat162* x2 = reinterpret_cast<const __nv_bfloat162*>(&xv);
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const float2 a = __bfloat1622float2(w2[e]), b = __bfloat1622float2(x2[e]);
              acc[r] += a.x * b.x + a.y * b.y;
            }
          }
        }
      }
    }
#pragma unroll
    for (int r = 0; r < R; ++r) acc[r] = cuda::warp_sum(acc[r]);
    if constexpr (KS > 1) {
      __shared__ float part[KS][CH][R];
      if (lane == 0) {
#pragma unroll
        for (int r = 0; r < R; ++r) part[warp / CH][warp % CH][r] = acc[r];
      }
      __syncthreads();
      if (warp < CH && lane == 0) {
#pragma unroll
        for (int r = 0; r < R; ++r) {
          float s = 0.0f;
#pragma unroll
          for (int q = 0; q < KS; ++q) s += part[q][warp][r];
          acc[r] = s;
        }
      }
      __syncthreads();  // part is written again by the next group
    }
    if (lane != 0 || warp >= CH || o >= OC) continue;
    const float b = bias ? __bfloat162float(bias[o]) : 0.0f;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int64_t at = int64_t(r) * OC + o;
      float v = acc[r] + b;
      if (residual) v += __bfloat162float(residual[at]);
      if (pre) {
        pre[at] = __float2bfloat16(v);
        v = gelu_tanh(v);
      }
      if constexpr (sizeof(OutT) == 4) out[at] = v;
      else out[at] = __float2bfloat16(v);
    }
  }
}

// Shared memory the NORM form needs for R rows of C (the rows, bf16).
size_t few_rows_norm_bytes(int R, int C) { return size_t(R) * C * sizeof(bf16); }
constexpr size_t kFewRowsNormMaxBytes = 48 * 1024;  // without opting in to more

// Launches the few-rows kernel; ln_w non-null selects the NORM form. KS: warps a channel.
template <typename OutT>
void few_rows_linear(OutT* out, bf16* pre, const bf16* in, const int32_t* in_index,
                     const bf16* ln_w, const bf16* ln_b, const bf16* w, const bf16* bias,
                     const bf16* residual, int R, int C, int OC, int KS, int max_blocks,
                     cudaStream_t s) {
  const int CH = kFewRowsWarps / KS;
  const dim3 grid(std::min((OC + CH - 1) / CH, max_blocks)), block(kFewRowsWarps * 32);
  const bool norm = ln_w != nullptr;
  const size_t shared = norm ? few_rows_norm_bytes(R, C) : 0;
  auto go = [&](auto kernel) {
    kernel<<<grid, block, shared, s>>>(out, pre, in, in_index, ln_w, ln_b, w, bias, residual, C, OC);
  };
  auto with_rows = [&](auto rows) {
    constexpr int n = decltype(rows)::value;
    if constexpr (sizeof(OutT) == 4) {  // the LM head: enough channels for one warp each
      if (norm) go(few_rows_linear_kernel<n, 1, OutT, true>);
      else go(few_rows_linear_kernel<n, 1, OutT, false>);
    } else if (KS == 1) {
      if (norm) go(few_rows_linear_kernel<n, 1, OutT, true>);
      else go(few_rows_linear_kernel<n, 1, OutT, false>);
    } else if (KS == 2) {
      if (norm) go(few_rows_linear_kernel<n, 2, OutT, true>);
      else go(few_rows_linear_kernel<n, 2, OutT, false>);
    } else {
      if (norm) go(few_rows_linear_kernel<n, 4, OutT, true>);
      else go(few_rows_linear_kernel<n, 4, OutT, false>);
    }
  };
  switch (R) {
    case 1: with_rows(std::integral_constant<int, 1>{}); break;
    case 2: with_rows(std::integral_constant<int, 2>{}); break;
    case 3: with_rows(std::integral_constant<int, 3>{}); break;
    case 4: with_rows(std::integral_constant<int, 4>{}); break;
    case 5: with_rows(std::integral_constant<int, 5>{}); break;
    case 6: with_rows(std::integral_constant<int, 6>{}); break;
    case 7: with_rows(std::integral_constant<int, 7>{}); break;
    case 8: with_rows(std::integral_constant<int, 8>{}); break;
    default: throw Error("few_rows_linear: " + std::to_string(R) + " rows");
  }
  AISCALE_CUDA_LAUNCH_CHECK();
}

// out (n, C) = in[index[i]] for i < n.
__global__ void gather_rows_kernel(bf16* out, const bf16* in, const int32_t* index, int C) {
  const int i = blockIdx.x;
  const int64_t from = index[i];
  for (int c = threadIdx.x; c < C; c += blockDim.x) out[int64_t(i) * C + c] = in[from * C + c];
}

template <typename T>
T* device_alloc(size_t count) {
  void* p = nullptr;
  AISCALE_CUDA_CHECK(cudaMalloc(&p, count * sizeof(T)));
  return static_cast<T*>(p);
}

}  // namespace
}  // namespace aiscale::nn
