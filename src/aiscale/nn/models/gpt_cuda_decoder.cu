// The GPT-2 decoder with a key/value cache on one GPU (gpt_cuda_decoder.h).
//
// Buffers, allocated once (R = max_rows, S = max_streams, C = n_embd):
//   weights    bf16 copy of the flat parameters (GptLayout order)
//   k/v cache  (n_layer, S, n_head, W, head_size) bf16 each (W = the context, at most
//              block_size): a stream's positions of one head are contiguous, so attention
//              reads them in order
//   x (R, C) residual stream, ln (R, C), qkv (R, 3C), att (R, C), fc and its
//   pre-activation (R, 4C), all bf16; LayerNorm statistics (R) fp32
//   logits (R, V) fp32 on the device and in pinned host memory
#include "aiscale/nn/models/gpt_cuda_decoder.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <type_traits>
#include <vector>

#include "aiscale/nn/models/gpt_cuda.cuh"
#include "aiscale/nn/models/gpt_layout.h"
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

// Row `row` of `in` LayerNormed into `dst` (C bf16) by one warp.
__device__ __forceinline__ void layernorm_row_to(bf16* dst, const bf16* row, const bf16* ln_w,
                                                 const bf16* ln_b, int C, int lane) {
  float sum = 0.0f;
  for (int k = lane * 8; k < C; k += 32 * 8) {
    const uint4 xv = *reinterpret_cast<const uint4*>(row + k);
    const __nv_bfloat162* x2 = reinterpret_cast<const __nv_bfloat162*>(&xv);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float2 a = __bfloat1622float2(x2[e]);
      sum += a.x + a.y;
    }
  }
  const float m = cuda::warp_sum(sum) / C;
  float sq = 0.0f;
  for (int k = lane * 8; k < C; k += 32 * 8) {
    const uint4 xv = *reinterpret_cast<const uint4*>(row + k);
    const __nv_bfloat162* x2 = reinterpret_cast<const __nv_bfloat162*>(&xv);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float2 a = __bfloat1622float2(x2[e]);
      sq += (a.x - m) * (a.x - m) + (a.y - m) * (a.y - m);
    }
  }
  const float r = rsqrtf(cuda::warp_sum(sq) / C + 1e-5f);
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

class Decoder final : public CudaGptDecoder {
 public:
  Decoder(const GptConfig& c, const float* params, int max_streams, int max_rows, int context)
      : c_(c), layout_(c), max_streams_(max_streams), max_rows_(max_rows), context_(context),
        cached_(static_cast<size_t>(max_streams), 0) {
    const int64_t C = c.n_embd, R = max_rows, V = c.vocab_size, n = layout_.size();
    AISCALE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    // The weights: fp32 through a staging buffer, rounded to bf16 on the device.
    weights_ = device_alloc<bf16>(n);
    float* staging = device_alloc<float>(n);
    AISCALE_CUDA_CHECK(cudaMemcpy(staging, params, n * sizeof(float), cudaMemcpyHostToDevice));
    cuda::cast_from_f32(DType::bf16, weights_, staging, n, stream_);
    AISCALE_CUDA_CHECK(cudaStreamSynchronize(stream_));
    AISCALE_CUDA_CHECK(cudaFree(staging));
    const int64_t cache = c.n_layer * int64_t(max_streams) * context * C;
    k_cache_ = device_alloc<bf16>(cache);
    v_cache_ = device_alloc<bf16>(cache);
    x_ = device_alloc<bf16>(R * C);
    ln_ = device_alloc<bf16>(R * C);
    qkv_ = device_alloc<bf16>(R * 3 * C);
    att_ = device_alloc<bf16>(R * C);
    fc_ = device_alloc<bf16>(R * 4 * C);
    fc_pre_ = device_alloc<bf16>(R * 4 * C);
    selected_ = device_alloc<bf16>(R * C);
    mean_ = device_alloc<float>(R);
    rstd_ = device_alloc<float>(R);
    rows_ = device_alloc<int32_t>(R * kRowInts);
    out_rows_ = device_alloc<int32_t>(R);
    logits_ = device_alloc<float>(R * V);
    AISCALE_CUDA_CHECK(cudaMallocHost(&host_rows_, R * kRowInts * sizeof(int32_t)));
    AISCALE_CUDA_CHECK(cudaMallocHost(&host_out_rows_, R * sizeof(int32_t)));
    AISCALE_CUDA_CHECK(cudaMallocHost(&host_logits_, R * V * sizeof(float)));
    workspace_ = device_alloc<char>(cuda::Gemm::kWorkspaceBytes);
    gemm_ = std::make_unique<cuda::Gemm>(workspace_, cuda::Gemm::kWorkspaceBytes);
    cudaDeviceProp prop{};
    int device = 0;
    AISCALE_CUDA_CHECK(cudaGetDevice(&device));
    AISCALE_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    device_name_ = std::string(prop.name) + " (cuda:" + std::to_string(device) + ")";
    sm_count_ = prop.multiProcessorCount;
    max_blocks_ = sm_count_ * (prop.maxThreadsPerMultiProcessor / (kFewRowsWarps * 32));
  }

  ~Decoder() override {
    for (auto& [n, g] : graphs_) cudaGraphExecDestroy(g);
    if (registered_) cudaHostUnregister(registered_);
    gemm_.reset();
    for (void* p : {(void*)weights_, (void*)k_cache_, (void*)v_cache_, (void*)x_, (void*)ln_,
                    (void*)qkv_, (void*)att_, (void*)fc_, (void*)fc_pre_, (void*)selected_,
                    (void*)mean_, (void*)rstd_, (void*)rows_, (void*)out_rows_, (void*)logits_,
                    workspace_})
      cudaFree(p);
    cudaFreeHost(host_rows_);
    cudaFreeHost(host_out_rows_);
    cudaFreeHost(host_logits_);
    cudaStreamDestroy(stream_);
  }

  int max_streams() const override { return max_streams_; }
  int max_rows() const override { return max_rows_; }
  int context() const override { return context_; }
  std::string device_name() const override { return device_name_; }

  const float* run(const DecodeRow* rows, int n_rows, const int32_t* out_rows, int n_out,
                   float* dest) override {
    check(rows, n_rows, out_rows, n_out);
    bool all_logits = n_out == n_rows;
    for (int i = 0; i < n_rows; ++i) {
      host_rows_[kRowInts * i] = rows[i].stream;
      host_rows_[kRowInts * i + 1] = rows[i].position;
      host_rows_[kRowInts * i + 2] = rows[i].token;
    }
    for (int i = 0; i < n_out; ++i) {
      host_out_rows_[i] = out_rows[i];
      all_logits = all_logits && out_rows[i] == i;
    }
    AISCALE_CUDA_CHECK(cudaMemcpyAsync(rows_, host_rows_, n_rows * kRowInts * sizeof(int32_t),
                                       cudaMemcpyHostToDevice, stream_));
    AISCALE_CUDA_CHECK(cudaMemcpyAsync(out_rows_, host_out_rows_, n_out * sizeof(int32_t),
                                       cudaMemcpyHostToDevice, stream_));
    // A call that wants every row's logits (a decoding step) is replayed as a graph from the
    // second call of its row count on (the kernels read the rows from the device); the first
    // runs eagerly and plans the GEMMs.
    const bool distinct = distinct_streams(rows, n_rows);
    const int key = 2 * n_rows + (distinct ? 1 : 0);
    auto graph = graphs_.find(key);
    if (all_logits && graph != graphs_.end()) {
      AISCALE_CUDA_CHECK(cudaGraphLaunch(graph->second, stream_));
    } else if (all_logits && eager_steps_[key]++ > 0) {
      cudaGraph_t g = nullptr;
      AISCALE_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
      enqueue(n_rows, n_out, distinct);
      AISCALE_CUDA_CHECK(cudaStreamEndCapture(stream_, &g));
      cudaGraphExec_t exec = nullptr;
      AISCALE_CUDA_CHECK(cudaGraphInstantiate(&exec, g, 0));
      AISCALE_CUDA_CHECK(cudaGraphDestroy(g));
      graphs_[key] = exec;
      AISCALE_CUDA_CHECK(cudaGraphLaunch(exec, stream_));
    } else {
      enqueue(n_rows, n_out, distinct);
    }
    // The logits to the caller's buffer (pinned once here, so that the copy runs at the
    // link's speed and needs no second copy), else to the decoder's own pinned buffer.
    float* to = dest ? dest : host_logits_;
    const size_t bytes = size_t(n_out) * c_.vocab_size * sizeof(float);
    if (dest && (dest != registered_ || bytes > registered_bytes_)) {
      if (registered_) cudaHostUnregister(registered_);
      registered_ = nullptr;
      registered_bytes_ = 0;
      if (cudaHostRegister(dest, bytes, cudaHostRegisterDefault) == cudaSuccess) {
        registered_ = dest;
        registered_bytes_ = bytes;
      } else {
        cudaGetLastError();  // pageable memory: the copy still works, more slowly
      }
    }
    if (n_out > 0)
      AISCALE_CUDA_CHECK(cudaMemcpyAsync(to, logits_, bytes, cudaMemcpyDeviceToHost, stream_));
    AISCALE_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return to;
  }

 private:
  // Throws for rows the cache cannot take; records each stream's cached length.
  void check(const DecodeRow* rows, int n_rows, const int32_t* out_rows, int n_out) {
    if (n_rows < 1 || n_rows > max_rows_)
      throw Error("decoder: " + std::to_string(n_rows) + " rows in one call; it holds 1 to " +
                  std::to_string(max_rows_));
    if (n_out < 0 || n_out > n_rows)
      throw Error("decoder: " + std::to_string(n_out) + " logits rows asked of " +
                  std::to_string(n_rows) + " rows");
    for (int i = 0; i < n_out; ++i)
      if (out_rows[i] < 0 || out_rows[i] >= n_rows)
        throw Error("decoder: logits of row " + std::to_string(out_rows[i]) + " asked of " +
                    std::to_string(n_rows) + " rows");
    std::vector<int32_t> cached = cached_;
    for (int i = 0; i < n_rows; ++i) {
      const DecodeRow& r = rows[i];
      if (r.stream < 0 || r.stream >= max_streams_)
        throw Error("decoder: stream " + std::to_string(r.stream) + " outside 0.." +
                    std::to_string(max_streams_ - 1));
      if (r.token < 0 || r.token >= c_.vocab_size)
        throw Error("decoder: token id " + std::to_string(r.token) + " outside the vocabulary of " +
                    std::to_string(c_.vocab_size));
      if (r.position < 0 || r.position >= context_)
        throw Error("decoder: position " + std::to_string(r.position) +
                    " outside the decoder's context of " + std::to_string(context_) +
                    " positions");
      if (r.position > cached[r.stream])
        throw Error("decoder: stream " + std::to_string(r.stream) + " position " +
                    std::to_string(r.position) + " after only " + std::to_string(cached[r.stream]) +
                    " cached positions (rows of a stream go in order, without gaps)");
      cached[r.stream] = r.position + 1;
    }
    cached_ = cached;
  }

  const bf16* w(int64_t offset) const { return weights_ + offset; }

  bool distinct_streams(const DecodeRow* rows, int n_rows) {
    seen_.assign(static_cast<size_t>(max_streams_), 0);
    for (int i = 0; i < n_rows; ++i) {
      if (seen_[rows[i].stream]) return false;
      seen_[rows[i].stream] = 1;
    }
    return true;
  }

  // Whether the few-rows kernels take R rows (and, with norm, their LayerNorm in shared
  // memory); cuBLASLt's GEMMs and the separate LayerNorm kernel beyond.
  bool few_rows(int64_t R, bool norm) const {
    return R <= kFewRows && (!norm || few_rows_norm_bytes(static_cast<int>(R),
                                                          static_cast<int>(c_.n_embd)) <=
                                          kFewRowsNormMaxBytes);
  }

  // distinct: no two rows share a stream (then attention appends to the cache itself).
  void enqueue(int n_rows, int n_out, bool distinct) {
    const int64_t C = c_.n_embd, V = c_.vocab_size, R = n_rows;
    const int NH = static_cast<int>(c_.n_head), HS = static_cast<int>(C / c_.n_head);
    const int T = context_;
    const int threads = 256;
    embed_rows_kernel<<<n_rows, threads, 0, stream_>>>(x_, rows_, w(0), w(layout_.wpe()),
                                                       static_cast<int>(C));
    AISCALE_CUDA_LAUNCH_CHECK();
    const int64_t cache_layer = int64_t(max_streams_) * T * C;
    const float scale_log2 = 1.4426950408889634f / std::sqrt(static_cast<float>(HS));
    using P = GptBlockParam;
    for (int64_t l = 0; l < c_.n_layer; ++l) {
      bf16* kc = k_cache_ + l * cache_layer;
      bf16* vc = v_cache_ + l * cache_layer;
      // qkv = ln1(x) @ qkv_w^T + b
      norm_linear(qkv_, nullptr, layout_.at(l, P::ln1_w), layout_.at(l, P::ln1_b),
                  layout_.at(l, P::qkv_w), layout_.at(l, P::qkv_b), R, 3 * C);
      if (!distinct) {
        kv_append_kernel<<<n_rows, threads, 0, stream_>>>(kc, vc, qkv_, rows_,
                                                          static_cast<int>(C), NH, HS, T);
        AISCALE_CUDA_LAUNCH_CHECK();
      }
      attention(kc, vc, n_rows, HS, distinct, scale_log2);
      // x += att @ proj^T + b (the residual read and written in place)
      linear(x_, nullptr, att_, layout_.at(l, P::proj_w), layout_.at(l, P::proj_b), x_, R, C, C);
      // fc = gelu(ln2(x) @ fc_w^T + b); x += fc @ fcproj^T + b
      norm_linear(fc_, fc_pre_, layout_.at(l, P::ln2_w), layout_.at(l, P::ln2_b),
                  layout_.at(l, P::fc_w), layout_.at(l, P::fc_b), R, 4 * C);
      linear(x_, nullptr, fc_, layout_.at(l, P::fcproj_w), layout_.at(l, P::fcproj_b), x_, R,
             4 * C, C);
    }
    if (n_out == 0) return;
    // logits (n_out, V) fp32 = lnf(x)[out_rows] @ wte (V, C)^T (the tied LM head)
    if (few_rows(n_out, true)) {
      few_rows_linear<float>(logits_, nullptr, x_, out_rows_, w(layout_.lnf_w()),
                             w(layout_.lnf_b()), w(0), nullptr, nullptr, n_out,
                             static_cast<int>(C), static_cast<int>(V), 1, max_blocks_, stream_);
      return;
    }
    cuda::layernorm_forward(DType::bf16, ln_, mean_, rstd_, x_, w(layout_.lnf_w()),
                            w(layout_.lnf_b()), R, C, stream_);
    gather_rows_kernel<<<n_out, threads, 0, stream_>>>(selected_, ln_, out_rows_,
                                                       static_cast<int>(C));
    AISCALE_CUDA_LAUNCH_CHECK();
    cuda::GemmCall g;
    g.trans_a = true;
    g.m = V;
    g.n = n_out;
    g.k = C;
    g.a = w(0);
    g.lda = C;
    g.b = selected_;
    g.ldb = C;
    g.d = logits_;
    g.ldd = V;
    g.ab_type = DType::bf16;
    g.cd_type = DType::f32;
    if (!gemm_->run(g, stream_))
      throw Error("decoder: cuBLASLt has no algorithm for the LM head (" + std::to_string(V) +
                  " x " + std::to_string(n_out) + " x " + std::to_string(C) + ")");
  }

  void attention(bf16* kc, bf16* vc, int n_rows, int HS, bool append, float scale_log2) {
    const dim3 grid(n_rows, static_cast<unsigned>(c_.n_head));
    const int C = static_cast<int>(c_.n_embd), NH = static_cast<int>(c_.n_head), T = context_;
    auto go = [&](auto kernel) {
      kernel<<<grid, 256, 0, stream_>>>(att_, qkv_, kc, vc, rows_, C, NH, T, scale_log2);
    };
    switch (HS * 2 + (append ? 1 : 0)) {
      case 32: go(cached_attention_kernel<16, false>); break;
      case 33: go(cached_attention_kernel<16, true>); break;
      case 64: go(cached_attention_kernel<32, false>); break;
      case 65: go(cached_attention_kernel<32, true>); break;
      case 128: go(cached_attention_kernel<64, false>); break;
      case 129: go(cached_attention_kernel<64, true>); break;
      default:
        if (append) go(cached_attention_kernel<128, true>);
        else go(cached_attention_kernel<128, false>);
    }
    AISCALE_CUDA_LAUNCH_CHECK();
  }

  // Warps a channel for a few-rows layer of OC channels over C: one, unless that leaves
  // the GPU's warps short of work (the projections back to the model width).
  int warps_per_channel(int64_t C, int64_t OC) const {
    int ks = 1;
    while (ks < 4 && OC * ks < int64_t(sm_count_) * kFewRowsWarps * 4 && C / (ks * 2) >= 256)
      ks *= 2;
    return ks;
  }

  // out (R, OC) = LayerNorm(x) @ weight^T + bias (GELU with pre), the norm's weight and
  // bias at norm_w, norm_b: in the few-rows kernel, or the LayerNorm kernel then `linear`.
  void norm_linear(bf16* out, bf16* pre, int64_t norm_w, int64_t norm_b, int64_t weight,
                   int64_t bias, int64_t R, int64_t OC) {
    const int64_t C = c_.n_embd;
    if (few_rows(R, true)) {
      few_rows_linear<bf16>(out, pre, x_, nullptr, w(norm_w), w(norm_b), w(weight), w(bias),
                            nullptr, static_cast<int>(R), static_cast<int>(C),
                            static_cast<int>(OC), warps_per_channel(C, OC), max_blocks_, stream_);
      return;
    }
    cuda::layernorm_forward(DType::bf16, ln_, mean_, rstd_, x_, w(norm_w), w(norm_b), R, C,
                            stream_);
    linear(out, pre, ln_, weight, bias, nullptr, R, C, OC);
  }

  // out (R, OC) = in (R, C) @ weight^T + bias [+ residual], GELU with pre: the few-rows
  // kernel for a decoding step of up to kFewRows streams, cuBLASLt's GEMMs beyond.
  void linear(bf16* out, bf16* pre, const bf16* in, int64_t weight, int64_t bias,
              const bf16* residual, int64_t R, int64_t C, int64_t OC) {
    if (few_rows(R, false)) {
      few_rows_linear<bf16>(out, pre, in, nullptr, nullptr, nullptr, w(weight), w(bias),
                            residual, static_cast<int>(R), static_cast<int>(C),
                            static_cast<int>(OC), warps_per_channel(C, OC), max_blocks_, stream_);
      return;
    }
    cuda::linear_forward(*gemm_, DType::bf16, out, pre, in, w(weight), w(bias), residual, R, C,
                         OC, cuda::LinearOptions{}, stream_);
  }

  GptConfig c_;
  GptLayout layout_;
  int max_streams_, max_rows_, context_;
  std::vector<int32_t> cached_;  // positions each stream holds in the cache
  std::vector<char> seen_;       // distinct_streams' scratch
  cudaStream_t stream_ = nullptr;
  bf16 *weights_ = nullptr, *k_cache_ = nullptr, *v_cache_ = nullptr;
  bf16 *x_ = nullptr, *ln_ = nullptr, *qkv_ = nullptr, *att_ = nullptr, *fc_ = nullptr,
       *fc_pre_ = nullptr, *selected_ = nullptr;
  float *mean_ = nullptr, *rstd_ = nullptr, *logits_ = nullptr, *host_logits_ = nullptr;
  int32_t *rows_ = nullptr, *out_rows_ = nullptr, *host_rows_ = nullptr, *host_out_rows_ = nullptr;
  void* workspace_ = nullptr;
  float* registered_ = nullptr;  // the caller's logits buffer, pinned by cudaHostRegister
  size_t registered_bytes_ = 0;
  std::unique_ptr<cuda::Gemm> gemm_;
  // Decoding steps by 2 x rows + (rows of distinct streams).
  std::map<int, cudaGraphExec_t> graphs_;
  std::map<int, int> eager_steps_;
  int sm_count_ = 1, max_blocks_ = 1;  // few-rows kernels: blocks that run at once
  std::string device_name_;
};

}  // namespace

namespace detail {
std::unique_ptr<CudaGptDecoder> create_cuda_gpt_decoder(const GptConfig& c, const float* params,
                                                        int max_streams, int max_rows,
                                                        int context) {
  return std::make_unique<Decoder>(c, params, max_streams, max_rows, context);
}
}  // namespace detail

}  // namespace aiscale::nn
