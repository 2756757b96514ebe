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

#include <cmath>
#include <map>
#include <string>
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
template <int HS>
__global__ void __launch_bounds__(256)
cached_attention_kernel(bf16* out, const bf16* qkv, const bf16* k_cache, const bf16* v_cache,
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
  __syncthreads();
  const bf16* kb = k_cache + (s * NH + h) * T * HS;
  const bf16* vb = v_cache + (s * NH + h) * T * HS;
  float m = -INFINITY, l = 0.0f, acc[PER];
#pragma unroll
  for (int i = 0; i < PER; ++i) acc[i] = 0.0f;
  for (int base = warp * 32; base <= p; base += kWarps * 32) {
    const int j = base + lane;
    float score = -INFINITY;
    if (j <= p) {
      const __nv_bfloat162* k2 = reinterpret_cast<const __nv_bfloat162*>(kb + int64_t(j) * HS);
      float dot = 0.0f;
#pragma unroll
      for (int d = 0; d < HS / 2; ++d) {
        const float2 kv = __bfloat1622float2(k2[d]);
        dot += q[2 * d] * kv.x + q[2 * d + 1] * kv.y;
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
    const int n = min(32, p - base + 1);
    for (int i = 0; i < n; ++i) {
      const float w = __shfl_sync(0xffffffffu, pj, i);
      if (active) {
        const bf16* vrow = vb + int64_t(base + i) * HS + lane * PER;
#pragma unroll
        for (int e = 0; e < PER; ++e) acc[e] += w * __bfloat162float(vrow[e]);
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
// out = gelu(pre) (tanh form, as the training kernels). One warp per output channel reads
// the channel's weight row once in 16-byte pieces and keeps R sums (a matrix-vector product
// streams the weights; a GEMM kernel for R = 1 spends most of its time on its tiles). C is
// a multiple of 8 (make_cuda_gpt_decoder checks n_embd). Out may be the residual (each
// element read and written by the one lane that owns it). OutT: bf16, or fp32 (the logits).
constexpr int kFewRows = 8;
template <int R, typename OutT>
__global__ void __launch_bounds__(256)
few_rows_linear_kernel(OutT* out, bf16* pre, const bf16* in, const bf16* w, const bf16* bias,
                       const bf16* residual, int C, int OC) {
  const int o = blockIdx.x * 8 + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (o >= OC) return;
  float acc[R];
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r] = 0.0f;
  const bf16* wrow = w + int64_t(o) * C;
  for (int k = lane * 8; k < C; k += 32 * 8) {
    const uint4 wv = *reinterpret_cast<const uint4*>(wrow + k);
    const __nv_bfloat162* w2 = reinterpret_cast<const __nv_bfloat162*>(&wv);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const uint4 xv = *reinterpret_cast<const uint4*>(in + int64_t(r) * C + k);
      const __nv_bfloat162* x2 = reinterpret_cast<const __nv_bfloat162*>(&xv);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float2 a = __bfloat1622float2(w2[e]), b = __bfloat1622float2(x2[e]);
        acc[r] += a.x * b.x + a.y * b.y;
      }
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], d);
  }
  if (lane != 0) return;
  const float b = bias ? __bfloat162float(bias[o]) : 0.0f;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int64_t at = int64_t(r) * OC + o;
    float v = acc[r] + b;
    if (residual) v += __bfloat162float(residual[at]);
    if (pre) {
      pre[at] = __float2bfloat16(v);
      const float u = 0.7978845608028654f * (v + 0.044715f * v * v * v);  // sqrt(2/pi) (...)
      v = 0.5f * v * (1.0f + tanhf(u));
    }
    if constexpr (sizeof(OutT) == 4) out[at] = v;
    else out[at] = __float2bfloat16(v);
  }
}

template <typename OutT>
void few_rows_linear(OutT* out, bf16* pre, const bf16* in, const bf16* w, const bf16* bias,
                     const bf16* residual, int R, int C, int OC, cudaStream_t s) {
  const dim3 grid((OC + 7) / 8), block(256);
  switch (R) {
#define AISCALE_FEW_ROWS(n) \
    case n: few_rows_linear_kernel<n, OutT><<<grid, block, 0, s>>>(out, pre, in, w, bias, residual, C, OC); break;
    AISCALE_FEW_ROWS(1) AISCALE_FEW_ROWS(2) AISCALE_FEW_ROWS(3) AISCALE_FEW_ROWS(4)
    AISCALE_FEW_ROWS(5) AISCALE_FEW_ROWS(6) AISCALE_FEW_ROWS(7) AISCALE_FEW_ROWS(8)
#undef AISCALE_FEW_ROWS
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
    auto graph = graphs_.find(n_rows);
    if (all_logits && graph != graphs_.end()) {
      AISCALE_CUDA_CHECK(cudaGraphLaunch(graph->second, stream_));
    } else if (all_logits && eager_steps_[n_rows]++ > 0) {
      cudaGraph_t g = nullptr;
      AISCALE_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
      enqueue(n_rows, n_out);
      AISCALE_CUDA_CHECK(cudaStreamEndCapture(stream_, &g));
      cudaGraphExec_t exec = nullptr;
      AISCALE_CUDA_CHECK(cudaGraphInstantiate(&exec, g, 0));
      AISCALE_CUDA_CHECK(cudaGraphDestroy(g));
      graphs_[n_rows] = exec;
      AISCALE_CUDA_CHECK(cudaGraphLaunch(exec, stream_));
    } else {
      enqueue(n_rows, n_out);
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

  void enqueue(int n_rows, int n_out) {
    const int64_t C = c_.n_embd, V = c_.vocab_size, R = n_rows;
    const int NH = static_cast<int>(c_.n_head), HS = static_cast<int>(C / c_.n_head);
    const int T = context_;
    const int threads = 256;
    const DType t = DType::bf16;
    embed_rows_kernel<<<n_rows, threads, 0, stream_>>>(x_, rows_, w(0), w(layout_.wpe()),
                                                       static_cast<int>(C));
    AISCALE_CUDA_LAUNCH_CHECK();
    const int64_t cache_layer = int64_t(max_streams_) * T * C;
    const float scale_log2 = 1.4426950408889634f / std::sqrt(static_cast<float>(HS));
    using P = GptBlockParam;
    for (int64_t l = 0; l < c_.n_layer; ++l) {
      bf16* kc = k_cache_ + l * cache_layer;
      bf16* vc = v_cache_ + l * cache_layer;
      cuda::layernorm_forward(t, ln_, mean_, rstd_, x_, w(layout_.at(l, P::ln1_w)),
                              w(layout_.at(l, P::ln1_b)), R, C, stream_);
      linear(qkv_, nullptr, ln_, layout_.at(l, P::qkv_w), layout_.at(l, P::qkv_b), nullptr, R, C,
             3 * C);
      kv_append_kernel<<<n_rows, threads, 0, stream_>>>(kc, vc, qkv_, rows_, static_cast<int>(C),
                                                        NH, HS, T);
      AISCALE_CUDA_LAUNCH_CHECK();
      const dim3 grid(n_rows, NH);
      switch (HS) {
        case 16: cached_attention_kernel<16><<<grid, 256, 0, stream_>>>(att_, qkv_, kc, vc, rows_, static_cast<int>(C), NH, T, scale_log2); break;
        case 32: cached_attention_kernel<32><<<grid, 256, 0, stream_>>>(att_, qkv_, kc, vc, rows_, static_cast<int>(C), NH, T, scale_log2); break;
        case 64: cached_attention_kernel<64><<<grid, 256, 0, stream_>>>(att_, qkv_, kc, vc, rows_, static_cast<int>(C), NH, T, scale_log2); break;
        default: cached_attention_kernel<128><<<grid, 256, 0, stream_>>>(att_, qkv_, kc, vc, rows_, static_cast<int>(C), NH, T, scale_log2); break;
      }
      AISCALE_CUDA_LAUNCH_CHECK();
      // x += att @ proj^T + b (the residual read and written in place)
      linear(x_, nullptr, att_, layout_.at(l, P::proj_w), layout_.at(l, P::proj_b), x_, R, C, C);
      cuda::layernorm_forward(t, ln_, mean_, rstd_, x_, w(layout_.at(l, P::ln2_w)),
                              w(layout_.at(l, P::ln2_b)), R, C, stream_);
      linear(fc_, fc_pre_, ln_, layout_.at(l, P::fc_w), layout_.at(l, P::fc_b), nullptr, R, C,
             4 * C);
      linear(x_, nullptr, fc_, layout_.at(l, P::fcproj_w), layout_.at(l, P::fcproj_b), x_, R,
             4 * C, C);
    }
    cuda::layernorm_forward(t, ln_, mean_, rstd_, x_, w(layout_.lnf_w()), w(layout_.lnf_b()), R,
                            C, stream_);
    if (n_out == 0) return;
    gather_rows_kernel<<<n_out, threads, 0, stream_>>>(selected_, ln_, out_rows_,
                                                       static_cast<int>(C));
    AISCALE_CUDA_LAUNCH_CHECK();
    // logits (n_out, V) fp32 = selected (n_out, C) @ wte (V, C)^T (the tied LM head)
    if (n_out <= kFewRows) {
      few_rows_linear<float>(logits_, nullptr, selected_, w(0), nullptr, nullptr, n_out,
                             static_cast<int>(C), static_cast<int>(V), stream_);
      return;
    }
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

  // out (R, OC) = in (R, C) @ weight^T + bias [+ residual], GELU with pre: the few-rows
  // kernel for a decoding step of up to kFewRows streams, cuBLASLt's GEMMs beyond.
  void linear(bf16* out, bf16* pre, const bf16* in, int64_t weight, int64_t bias,
              const bf16* residual, int64_t R, int64_t C, int64_t OC) {
    if (R <= kFewRows) {
      few_rows_linear<bf16>(out, pre, in, w(weight), w(bias), residual, static_cast<int>(R),
                            static_cast<int>(C), static_cast<int>(OC), stream_);
      return;
    }
    cuda::linear_forward(*gemm_, DType::bf16, out, pre, in, w(weight), w(bias), residual, R, C,
                         OC, cuda::LinearOptions{}, stream_);
  }

  GptConfig c_;
  GptLayout layout_;
  int max_streams_, max_rows_, context_;
  std::vector<int32_t> cached_;  // positions each stream holds in the cache
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
  std::map<int, cudaGraphExec_t> graphs_;  // decoding steps by number of streams
  std::map<int, int> eager_steps_;
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
