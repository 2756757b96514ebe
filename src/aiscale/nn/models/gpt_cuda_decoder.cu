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
#include "aiscale/nn/models/gpt_cuda_decoder_kernels.cuh"
#include "aiscale/nn/models/gpt_layout.h"
#include "aiscale/ops/cuda/common.cuh"
#include "aiscale/ops/cuda/cuda_ops.cuh"

namespace aiscale::nn {
namespace {

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
