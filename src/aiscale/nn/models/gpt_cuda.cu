// GPT-2 on one CUDA GPU: forward, backward and AdamW over the ops of ops/cuda.
//
// Precision: activations and the working copy of the weights in the run's dtype (bf16 by
// default; fp16; fp32 for checks), fp32 accumulation everywhere, fp32 master weights,
// gradients (one flat buffer in the order of the parameter layout, nn/models/gpt_layout.h)
// and AdamW moments. Memory: one cudaMalloc at construction holds everything, including
// the cuBLASLt workspace and the data-parallel reducer's buffers; a step allocates nothing.
//
// Fusions (each with a plain fallback, see docs/design/gpu-training-step.md):
// - bias, residual add, GELU (+ its pre-activation for backward) in the GEMM epilogues;
//   dGELU and the bias gradient of the MLP's first layer in a backward GEMM's epilogue;
// - the bias gradients of the two projections that write into the residual stream come
//   out of the LayerNorm backward kernels (column sums of the residual gradient);
// - softmax + cross-entropy + its backward in one kernel during forward, dlogits written
//   in place over the logits (scaled by the last grad_multiplier; backward corrects any
//   change through the GEMMs' alpha);
// - flash attention forward / backward (no (T, T) matrix).
//
// Data parallelism (options.comm with a device stream, i.e. NCCL, and several ranks) is
// the reducer's (parallel/data_parallel/reducer.cuh): this model publishes its gradient
// order (gpt_gradient_order), announces each point of backward that completes gradients,
// and cooperates for the embeddings: it gathers every rank's tokens during forward and
// hands its input gradient d(res0) to the reducer, then runs the embedding backward over
// all ranks' positions. ZeRO-1's sharded AdamW is optim/zero1.cuh; AISCALE_CUDA_TIMING's
// step timing is profile/step_timer.cuh. The environment variables read here are listed,
// with what each is for, in core/env.cpp.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "aiscale/nn/models/gpt.h"
#include "aiscale/nn/models/gpt_cuda.cuh"
#include "aiscale/nn/models/gpt_cuda_memory.cuh"
#include "aiscale/nn/models/gpt_layout.h"
#include "aiscale/ops/cuda/common.cuh"
#include "aiscale/ops/cuda/cuda_ops.cuh"
#include "aiscale/ops/cuda/cudnn_attention.h"
#include "aiscale/optim/adamw_layout.cuh"
#include "aiscale/optim/zero1.cuh"
#include "aiscale/parallel/data_parallel/reducer.cuh"
#include "aiscale/profile/gpu_op_recorder.cuh"
#include "aiscale/profile/step_timer.cuh"

namespace aiscale::nn {
namespace detail {

int cuda_device_count_checked() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return n;
}

namespace {

using cuda::AttentionImpl;
using cuda::Gemm;
using cuda::LinearOptions;
using P = GptBlockParam;

// train.attention (or bench --attention) when it names kernels, else
// AISCALE_CUDA_ATTENTION (which also knows the measurement variants), else automatic.
// (make_gpt has checked the option's value; the variable's is checked here.)
AttentionImpl choose_attention(const std::string& option, const std::string& variable) {
  static constexpr std::pair<const char*, AttentionImpl> kNames[] = {
      {"auto", AttentionImpl::automatic},       {"cudnn", AttentionImpl::cudnn},
      {"flash", AttentionImpl::flash},          {"simple", AttentionImpl::simple},
      {"flash_narrow", AttentionImpl::flash_narrow}, {"flash_occ3", AttentionImpl::flash_occ3},
      {"flash_two_barrier", AttentionImpl::flash_two_barrier}};
  const std::string name = option != "auto" ? option : variable;
  for (const auto& [n, impl] : kNames)
    if (name == n) return impl;
  throw Error("AISCALE_CUDA_ATTENTION = '" + name +
              "': use auto, cudnn, flash, flash_narrow, flash_occ3, flash_two_barrier or simple");
}


class GptCuda final : public GptModel, private GptCudaMemory {
 public:
  GptCuda(const GptConfig& c, const GptRunOptions& o, const std::vector<float>& init,
          const GptCudaSwitches& sw)
      : config_(c),
        options_(o),
        layout_(c),
        t_(o.precision),
        es_(dtype_size(o.precision)),
        B_(o.batch),
        T_(o.seq),
        C_(c.n_embd),
        NH_(c.n_head),
        L_(c.n_layer),
        V_(c.vocab_size),
        Vp_((c.vocab_size + 127) / 128 * 128),
        maxT_(c.block_size),
        N_(o.batch * o.seq) {
    P_ = layout_.size();
    Pw_ = P_ + (Vp_ - V_) * C_;
    AISCALE_CUDA_REQUIRE(static_cast<int64_t>(init.size()) == P_,
                         "init has " + std::to_string(init.size()) + " values");
    attention_impl_ = choose_attention(options_.attention, sw.attention);
    linear_.fused_gelu = sw.fused_gelu;
    linear_.fused_bgrad = sw.fused_bgrad;
    // Only where the padded rows land inside wpe's gradient.
    lm_head_padded_dw_ = sw.lm_head_pad && maxT_ >= Vp_ - V_;
    autotune_ = sw.autotune;
    fused_xent_ = sw.fused_xent;
    verbose_ = sw.verbose;
    if (!cuda::attention_supported(t_, C_ / NH_))
      throw Error("the CUDA attention kernels do not support head size " +
                  std::to_string(C_ / NH_));

    AISCALE_CUDA_CHECK(cudaGetDevice(&device_));
    cudaDeviceProp prop{};
    AISCALE_CUDA_CHECK(cudaGetDeviceProperties(&prop, device_));
    device_name_ = "cuda:" + std::to_string(device_) + " (" + prop.name + ")";
    AISCALE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    AISCALE_CUDA_CHECK(cudaEventCreateWithFlags(&loss_ready_, cudaEventDisableTiming));
    AISCALE_CUDA_CHECK(cudaEventCreateWithFlags(&buckets_sent_, cudaEventDisableTiming));
    if (sw.timing) timer_ = std::make_unique<profile::StepTimer>();
    // cuDNN's fused attention: asked for, or by default where this build has cuDNN and
    // its engines take the shape (else the own flash kernels, with a note).
    if (attention_impl_ == AttentionImpl::cudnn ||
        (attention_impl_ == AttentionImpl::automatic && cuda::cudnn_attention_compiled() &&
         t_ != DType::f32)) {
      try {
        cudnn_attention_ = std::make_unique<cuda::CudnnAttention>(t_, B_, T_, NH_, C_ / NH_);
      } catch (const Error& e) {
        if (attention_impl_ == AttentionImpl::cudnn) throw;
        std::fprintf(stderr, "[aiscale cuda] cuDNN attention unavailable, using flash: %s\n",
                     e.what());
      }
    }
    subscribe_reducer(sw.fused_norm);
    allocate(sizes());
    if (reducer_) {
      parallel::dp::Reducer::Buffers b;
      b.grads = grads_;
      b.comm_buffer = comm_buf_;
      b.sum_squares = sumsq_dev_;
      b.sum_squares_scratch = sumsq_scratch_;
      b.host_sum_squares = h_sumsq_;
      reducer_->connect(b, stream_, arena_, arena_bytes_);
    }
    gemm_ = std::make_unique<Gemm>(gemm_workspace_, Gemm::kWorkspaceBytes);

    // Parameters: master copy, working copy (padded vocabulary rows are zero), state.
    AISCALE_CUDA_CHECK(cudaMemsetAsync(arena_, 0, arena_bytes_, stream_));
    set_params(init.data());
    if (reducer_) reducer_->set_sync(false);  // the warm-up step communicates nothing
    warm_up();
    if (reducer_) reducer_->set_sync(true);
    // The warm-up forward (GEMM autotuning, first launches) is not a training step.
    if (timer_) timer_->forget();
    if (verbose_) {
      std::fprintf(stderr,
                   "[aiscale cuda] %s, %s, B=%lld T=%lld, arena %.2f GiB, attention %s, "
                   "fused gelu %d, dgelu %d, bgrad %d, xent %d, lm-head pad %d, autotune %d, "
                   "recompute %d\n",
                   device_name_.c_str(), cuda::dtype_str(t_),
                   static_cast<long long>(B_), static_cast<long long>(T_),
                   double(arena_bytes_) / double(1 << 30),
                   attention_kernels().c_str(),
                   int(linear_.fused_gelu), int(linear_.fused_dgelu), int(linear_.fused_bgrad),
                   int(fused_xent_), int(lm_head_padded_dw_), int(autotune_),
                   int(options_.recompute));
    }
  }

  ~GptCuda() override {
    if (timer_ && timer_->report(rank_) && reducer_) reducer_->report_bucket_times();
    zero1_.reset();
    reducer_.reset();  // waits for its collectives; unmaps the peers' buffers (copy engines)
    timer_.reset();
    gemm_.reset();
    release();
    if (loss_ready_) cudaEventDestroy(loss_ready_);
    if (buckets_sent_) cudaEventDestroy(buckets_sent_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  const GptConfig& config() const override { return config_; }
  const GptRunOptions& options() const override { return options_; }
  std::string device_name() const override { return device_name_; }
  std::string attention_kernels() const override {
    if (cudnn_attention_) return cudnn_attention_->describe();
    return cuda::attention_flash_supported(t_, C_ / NH_) && attention_impl_ != AttentionImpl::simple
               ? "flash"
               : "simple";
  }

  // One forward + backward on random tokens before the first real step: loads every
  // kernel and, with autotuning on, lets each GEMM time cuBLASLt's candidate algorithms
  // on the real buffers (some accumulate into the gradients, which are zeroed after).
  // Parameters and optimizer state are untouched.
  void warm_up() {
    std::vector<int32_t> in(static_cast<size_t>(N_)), tg(static_cast<size_t>(N_));
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (int64_t i = 0; i < N_; ++i) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      in[static_cast<size_t>(i)] = static_cast<int32_t>(x % static_cast<uint64_t>(V_));
      tg[static_cast<size_t>(i)] = static_cast<int32_t>((x >> 32) % static_cast<uint64_t>(V_));
    }
    gemm_->set_autotune(autotune_);
    forward(in.data(), tg.data());
    backward(1.0f);
    gemm_->set_autotune(false);
    zero_grad();
    AISCALE_CUDA_CHECK(cudaStreamSynchronize(stream_));
    has_targets_ = false;
    forward_done_ = false;
    logits_state_ = LogitsState::consumed;
    grad_multiplier_hint_ = 1.0f;
    dlogits_multiplier_ = 1.0f;
  }

  float forward(const int32_t* inputs, const int32_t* targets) override {
    check_tokens(inputs, "token");
    if (targets) check_tokens(targets, "target");
    finish_comm();  // a ZeRO-1 all-gather of the working copy (bounded wait)
    collect_phases();
    // AISCALE_CUDA_TIMING: the host's time in the parts of a forward with targets.
    if (timer_) timer_->start_laps(targets != nullptr);
    has_targets_ = targets != nullptr;
    // This forward/backward synchronises the gradients (and, overlapped, gathers every
    // rank's tokens for the embedding backward).
    const bool sync_step = reducer_ && reducer_->begin_step(targets != nullptr);
    const bool gather_tokens = sync_step && overlap_;
    // Upload inputs (and targets) through pinned staging, asynchronously.
    std::memcpy(h_tokens_, inputs, size_t(N_) * 4);
    if (targets) std::memcpy(h_tokens_ + N_, targets, size_t(N_) * 4);
    AISCALE_CUDA_CHECK(cudaMemcpyAsync(d_tokens_, h_tokens_, size_t(targets ? 2 : 1) * N_ * 4,
                                       cudaMemcpyHostToDevice, stream_));
    const int32_t* d_inputs = d_tokens_;
    const int32_t* d_targets = d_tokens_ + N_;
    const int64_t N = N_, C = C_, B = B_, T = T_, NH = NH_;
    cudaStream_t s = stream_;
    if (gather_tokens) reducer_->gather_inputs(tokens_all_, h_tokens_all_, d_tokens_, N * 4);

    mark(profile::StepTimer::kForward, targets != nullptr);
    prof_op("embedding_forward");
    cuda::embedding_forward(t_, res(0), d_inputs, wte_w(), wpe_w(), B, T, C, s);
    for (int64_t l = 0; l < L_; ++l) {
      Acts& a = acts_[l];
      prof_op("layernorm_forward");
      cuda::layernorm_forward(t_, a.ln1, a.ln1_mean, a.ln1_rstd, res(l), pw(l, in(P::ln1_w)),
                              pw(l, in(P::ln1_b)), N, C, s);
      prof_op("matmul_forward", 6.0 * N * C * C);
      cuda::linear_forward(*gemm_, t_, a.qkv, nullptr, a.ln1, pw(l, in(P::qkv_w)),
                           pw(l, in(P::qkv_b)), nullptr, N, C, 3 * C, linear_, s);
      prof_op("attention_forward", 2.0 * B * T * T * C);
      if (cudnn_attention_)
        cudnn_attention_->forward(a.atty, a.lse, a.qkv, cudnn_workspace_, s);
      else
        cuda::attention_forward(t_, a.atty, a.lse, a.qkv, B, T, C, NH, attention_impl_, s);
      prof_op("matmul_forward", 2.0 * N * C * C);
      cuda::linear_forward(*gemm_, t_, a.res_mid, nullptr, a.atty, pw(l, in(P::proj_w)),
                           pw(l, in(P::proj_b)), res(l), N, C, C, linear_, s);
      prof_op("layernorm_forward");
      cuda::layernorm_forward(t_, a.ln2, a.ln2_mean, a.ln2_rstd, a.res_mid, pw(l, in(P::ln2_w)),
                              pw(l, in(P::ln2_b)), N, C, s);
      prof_op("matmul_forward", 8.0 * N * C * C);
      cuda::linear_forward(*gemm_, t_, a.fc_gelu, a.fc_pre, a.ln2, pw(l, in(P::fc_w)),
                           pw(l, in(P::fc_b)), nullptr, N, C, 4 * C, linear_, s);
      prof_op("matmul_forward", 8.0 * N * C * C);
      cuda::linear_forward(*gemm_, t_, res(l + 1), nullptr, a.fc_gelu, pw(l, in(P::fcproj_w)),
                           pw(l, in(P::fcproj_b)), a.res_mid, N, 4 * C, C, linear_, s);
    }
    prof_op("layernorm_forward");
    cuda::layernorm_forward(t_, lnf_, lnf_mean_, lnf_rstd_, res(L_), lnf_w(), lnf_b(), N, C, s);
    prof_op("matmul_forward", 2.0 * N * C * Vp_);
    cuda::linear_forward(*gemm_, t_, logits_, nullptr, lnf_, wte_w(), nullptr, nullptr, N, C,
                         Vp_, linear_, s);
    prof_op(nullptr);
    forward_done_ = true;
    if (!targets) {
      logits_state_ = LogitsState::valid;
      AISCALE_CUDA_CHECK(cudaStreamSynchronize(s));
      return std::numeric_limits<float>::quiet_NaN();
    }
    // Loss (and, fused, dlogits scaled for the expected grad_multiplier).
    dlogits_multiplier_ = grad_multiplier_hint_;
    prof_op("softmax_xent_forward");
    cuda::softmax_xent(t_, losses_, logits_, d_targets, N, V_, Vp_,
                       dlogits_multiplier_ / static_cast<float>(N), fused_xent_, s);
    logits_state_ = fused_xent_ ? LogitsState::gradient : LogitsState::valid;
    prof_op("mean_reduce");
    cuda::mean_reduce(loss_dev_, losses_, N, s);
    prof_op(nullptr);
    AISCALE_CUDA_CHECK(cudaMemcpyAsync(h_loss_, loss_dev_, 4, cudaMemcpyDeviceToHost, s));
    AISCALE_CUDA_CHECK(cudaEventRecord(loss_ready_, s));
    if (timer_) timer_->mark_forward_end(s);
    lap(0);
    // While the GPU runs the forward pass: group token positions for embedding backward.
    AISCALE_CUDA_CHECK(cudaEventSynchronize(buckets_sent_));  // staging free again
    if (gather_tokens) {
      finish_comm();  // every rank's tokens are in h_tokens_all_
      lap(1);
      num_unique_ = cuda::build_token_buckets(h_tokens_all_, world_ * N, V_, h_unique_, h_offsets_,
                                              h_positions_, bucket_counts_);
    } else {
      lap(1);
      num_unique_ = cuda::build_token_buckets(inputs, N, V_, h_unique_, h_offsets_, h_positions_,
                                              bucket_counts_);
    }
    AISCALE_CUDA_CHECK(cudaMemcpyAsync(d_buckets_, h_buckets_, bucket_ints() * 4,
                                       cudaMemcpyHostToDevice, s));
    AISCALE_CUDA_CHECK(cudaEventRecord(buckets_sent_, s));
    lap(2);
    AISCALE_CUDA_CHECK(cudaEventSynchronize(loss_ready_));
    lap(3);
    return *h_loss_;
  }


  void backward(float grad_multiplier) override {
    if (!has_targets_ || logits_state_ == LogitsState::consumed)
      throw Error("backward() needs a forward() with targets before it");
    const int64_t N = N_, C = C_, B = B_, T = T_, NH = NH_;
    cudaStream_t s = stream_;
    float alpha = 1.0f;
    if (logits_state_ == LogitsState::gradient) {
      alpha = grad_multiplier / dlogits_multiplier_;
    } else {
      prof_op("softmax_xent_backward");
      cuda::softmax_xent(t_, losses_, logits_, d_tokens_ + N_, N, V_, Vp_,
                         grad_multiplier / static_cast<float>(N), true, s);
    }
    grad_multiplier_hint_ = grad_multiplier;
    logits_state_ = LogitsState::consumed;
    mark(profile::StepTimer::kBackward);

    // LM head (tied to wte): over the padded vocabulary for dlnf (padded rows of the
    // weight and of dlogits are zero), over the real rows for dwte.
    prof_op("matmul_backward", 2.0 * N * C * Vp_);
    cuda::linear_backward_input(*gemm_, t_, dln_, logits_, wte_w(), N, C, Vp_, Vp_, alpha,
                                nullptr, nullptr, bias_scratch_, linear_, s);
    // dwte over the real V rows; or, measured option, over all Vp rows: the padded rows
    // then add exact zeros (dlogits is 0 there) to the first gradients of wpe, which
    // follow wte in the flat buffer, and the GEMM's n is a multiple of 128.
    prof_op("matmul_backward", 2.0 * N * C * V_);
    cuda::linear_backward_weight(*gemm_, t_, grads_, nullptr, logits_, lnf_, N, C,
                                 lm_head_padded_dw_ ? Vp_ : V_, Vp_, alpha, bias_scratch_,
                                 linear_, s);
    const bool overlapped = reducer_ && reducer_->overlapping();
    ready(kGptAfterLmHead);
    prof_op("layernorm_backward");
    cuda::layernorm_backward(t_, dres_, g(lnf_w_off()), g(lnf_w_off() + C), 
                             L_ > 0 ? g(layer_off(L_ - 1) + in(P::fcproj_b)) : nullptr, dln_,
                             res(L_), lnf_w(), lnf_mean_, lnf_rstd_, N, C, false, ln_scratch_, s);

    for (int64_t l = L_ - 1; l >= 0; --l) {
      Acts& a = acts_[l];
      const int64_t lo = layer_off(l);
      if (options_.recompute) {
        prof_op("layernorm_forward");
        cuda::layernorm_forward(t_, a.ln1, a.ln1_mean, a.ln1_rstd, res(l), pw(l, in(P::ln1_w)),
                                pw(l, in(P::ln1_b)), N, C, s);
        prof_op("layernorm_forward");
        cuda::layernorm_forward(t_, a.ln2, a.ln2_mean, a.ln2_rstd, a.res_mid, pw(l, in(P::ln2_w)),
                                pw(l, in(P::ln2_b)), N, C, s);
        prof_op("gelu_forward");
        cuda::gelu_forward(t_, a.fc_gelu, a.fc_pre, N * 4 * C, s);
      }
      // MLP projection: dres = d(res[l + 1]); its bias gradient came from the LayerNorm
      // backward that produced dres.
      prof_op("matmul_backward", 8.0 * N * C * C);
      cuda::linear_backward_weight(*gemm_, t_, g(lo + in(P::fcproj_w)), nullptr, dres_, a.fc_gelu,
                                   N, 4 * C, C, C, 1.0f, bias_scratch_, linear_, s);
      prof_op("matmul_backward", 8.0 * N * C * C);
      cuda::linear_backward_input(*gemm_, t_, dfc_, dres_, pw(l, in(P::fcproj_w)), N, 4 * C, C, C,
                                  1.0f, a.fc_pre, bias_tmp_, bias_scratch_, linear_, s);
      prof_op("add_inplace");
      cuda::add_inplace(g(lo + in(P::fc_b)), bias_tmp_, 4 * C, s);
      // MLP first layer.
      prof_op("matmul_backward", 8.0 * N * C * C);
      cuda::linear_backward_weight(*gemm_, t_, g(lo + in(P::fc_w)), nullptr, dfc_, a.ln2, N, C,
                                   4 * C, 4 * C, 1.0f, bias_scratch_, linear_, s);
      prof_op("matmul_backward", 8.0 * N * C * C);
      cuda::linear_backward_input(*gemm_, t_, dln_, dfc_, pw(l, in(P::fc_w)), N, C, 4 * C, 4 * C,
                                  1.0f, nullptr, nullptr, bias_scratch_, linear_, s);
      prof_op("layernorm_backward");
      cuda::layernorm_backward(t_, dres_, g(lo + in(P::ln2_w)), g(lo + in(P::ln2_b)),
                               g(lo + in(P::proj_b)), dln_, a.res_mid, pw(l, in(P::ln2_w)),
                               a.ln2_mean, a.ln2_rstd, N, C, true, ln_scratch_, s);
      if (l == 0) ready(kGptLayer0Mlp);
      // Attention projection: dres = d(res_mid).
      prof_op("matmul_backward", 2.0 * N * C * C);
      cuda::linear_backward_weight(*gemm_, t_, g(lo + in(P::proj_w)), nullptr, dres_, a.atty, N, C,
                                   C, C, 1.0f, bias_scratch_, linear_, s);
      prof_op("matmul_backward", 2.0 * N * C * C);
      cuda::linear_backward_input(*gemm_, t_, datty_, dres_, pw(l, in(P::proj_w)), N, C, C, C,
                                  1.0f, nullptr, nullptr, bias_scratch_, linear_, s);
      prof_op("attention_backward", 4.0 * B * T * T * C);
      if (cudnn_attention_)
        cudnn_attention_->backward(dqkv_, datty_, a.qkv, a.atty, a.lse, dq_accum_, delta_,
                                   cudnn_workspace_, s);
      else
        cuda::attention_backward(t_, dqkv_, datty_, a.qkv, a.atty, a.lse, B, T, C, NH,
                                 dq_accum_, delta_, attention_impl_, s);
      // QKV projection.
      prof_op("matmul_backward", 6.0 * N * C * C);
      cuda::linear_backward_weight(*gemm_, t_, g(lo + in(P::qkv_w)), bias_tmp_, dqkv_, a.ln1, N, C,
                                   3 * C, 3 * C, 1.0f, bias_scratch_, linear_, s);
      prof_op("add_inplace");
      cuda::add_inplace(g(lo + in(P::qkv_b)), bias_tmp_, 3 * C, s);
      if (l == 0) ready(kGptLayer0Qkv);
      prof_op("matmul_backward", 6.0 * N * C * C);
      cuda::linear_backward_input(*gemm_, t_, dln_, dqkv_, pw(l, in(P::qkv_w)), N, C, 3 * C, 3 * C,
                                  1.0f, nullptr, nullptr, bias_scratch_, linear_, s);
      prof_op("layernorm_backward");
      cuda::layernorm_backward(t_, dres_, g(lo + in(P::ln1_w)), g(lo + in(P::ln1_b)),
                               l > 0 ? g(layer_off(l - 1) + in(P::fcproj_b)) : nullptr, dln_, res(l),
                               pw(l, in(P::ln1_w)), a.ln1_mean, a.ln1_rstd, N, C, true,
                               ln_scratch_, s);
      // (Without ZeRO the reducer holds layer 0's last part back until d(res0) is queued.)
      ready(static_cast<int>(l));
    }
    const int64_t Nb = bucket_capacity();
    mark(profile::StepTimer::kAfterLayer0);
    if (overlapped) {
      // Every rank's d(res0): the embedding backward over all ranks' positions adds the
      // summed embedding gradient, once the buckets holding wte and wpe are reduced.
      prof_op("allgather_input_gradients");
      reducer_->gather_input_gradients(dres_all_, dres_, N * C * int64_t(es_));
      prof_op("embedding_backward");
      cuda::embedding_backward(t_, grads_, g(V_ * C), dres_all_, d_buckets_, d_buckets_ + Nb,
                               d_buckets_ + 2 * Nb + 1, num_unique_, world_ * B, T, C, s);
    } else {
      prof_op("embedding_backward");
      cuda::embedding_backward(t_, grads_, g(V_ * C), dres_, d_buckets_, d_buckets_ + Nb,
                               d_buckets_ + 2 * Nb + 1, num_unique_, B, T, C, s);
      ready(parallel::dp::kAfterBackward);  // one bucket: everything
    }
    prof_op(nullptr);
    mark(profile::StepTimer::kAfterEmbedding);
    AISCALE_CUDA_LAUNCH_CHECK();
    if (verbose_ && !printed_plans_) {
      printed_plans_ = true;
      AISCALE_CUDA_CHECK(cudaStreamSynchronize(s));
      std::fprintf(stderr, "[aiscale cuda] GEMM plans:\n%s", gemm_->summary().c_str());
    }
  }


  void set_profiler(profile::OpProfiler* p) override {
    op_recorder_.reset();
    if (p) op_recorder_ = std::make_unique<profile::GpuOpRecorder>(*p, stream_, profile::kGpuTrack,
                                                                   "GPU: model stream");
    if (reducer_) reducer_->set_profiler(p);  // the communicator's stream, its own track
  }

  void zero_grad() override {
    finish_comm();
    prof_op("zero_grad");
    AISCALE_CUDA_CHECK(cudaMemsetAsync(grads_, 0, size_t(Ppad_) * 4, stream_));
    prof_op(nullptr);
    if (reducer_) reducer_->gradients_zeroed();
  }

  double grad_sum_squares() override {
    if (reducer_) return reducer_->grad_sum_squares();
    prof_op("sum_squares", 2.0 * double(P_));
    cuda::sum_squares(sumsq_dev_, grads_, P_, sumsq_scratch_, stream_);
    AISCALE_CUDA_CHECK(cudaMemcpyAsync(h_sumsq_, sumsq_dev_, 8, cudaMemcpyDeviceToHost, stream_));
    prof_op(nullptr);
    AISCALE_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return h_sumsq_[0];
  }

  void update(const ops::AdamWParams& hp) override {
    finish_comm();
    mark(profile::StepTimer::kUpdate);
    const cuda::AdamWLayout L =
        optim::gpt_adamw_layout(layout_, options_.decay_embeddings, (Vp_ - V_) * C_);
    prof_op("adamw_update");
    if (zero1_) {
      // AdamW on this rank's parts, all-gathered into gather_ in flat order, then copied
      // into the working copy's padded layout.
      zero1_->update(L, hp, t_, master_, gather_, grads_, m_, v_, stream_);
      copy_flat_to_work(gather_, stream_);
    } else {
      cuda::adamw_update(t_, master_, work_, grads_, m_, v_, L, hp, stream_);
      AISCALE_CUDA_LAUNCH_CHECK();
    }
    prof_op(nullptr);
    mark(profile::StepTimer::kEnd);
  }

  void logits_at(int64_t b, int64_t t, float* out) override {
    if (!forward_done_) throw Error("logits are not available: run forward() first");
    if (b < 0 || b >= B_ || t < 0 || t >= T_)
      throw Error("logits_at(" + std::to_string(b) + ", " + std::to_string(t) +
                  ") is outside the batch");
    const int64_t row = b * T_ + t;
    if (logits_state_ == LogitsState::valid) {
      cuda::cast_to_f32(t_, logits_row_, at(logits_, row * Vp_), V_, stream_);
    } else {
      // The logits were overwritten by their gradient: recompute this row from ln_f.
      cuda::logits_row(t_, logits_row_, at(lnf_, row * C_), wte_w(), V_, C_, stream_);
    }
    AISCALE_CUDA_CHECK(cudaMemcpyAsync(out, logits_row_, size_t(V_) * 4, cudaMemcpyDeviceToHost,
                                       stream_));
    AISCALE_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  // With ZeRO-1 the state is sharded: get_params / get_optimizer_state gather it (every

  // With ZeRO-1 the state is sharded: get_params / get_optimizer_state gather it (every
  // rank must call them) and, like set_params, use the gradient buffer as scratch.
  void get_params(float* out) const override {
    if (zero1_) zero1_->gather(master_, out, grads_, stream_);
    else download(out, master_);
  }
  void set_params(const float* in) override {
    finish_comm();
    float* full = zero1_ ? grads_ : master_;  // ZeRO-1: the whole vector passes through grads_
    upload(full, in);
    // Working copy: wte rows, then (after the zero padded rows) everything else.
    cuda::cast_from_f32(t_, work_, full, V_ * C_, stream_);
    AISCALE_CUDA_CHECK(cudaMemsetAsync(at(work_, V_ * C_), 0, size_t((Vp_ - V_) * C_) * es_,
                                       stream_));
    cuda::cast_from_f32(t_, at(work_, Vp_ * C_), full + V_ * C_, P_ - V_ * C_, stream_);
    if (zero1_) {
      zero1_->scatter(in, master_, stream_);
      AISCALE_CUDA_CHECK(cudaMemsetAsync(grads_, 0, size_t(Ppad_) * 4, stream_));
    }
    AISCALE_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  void get_grads(float* out) const override {
    finish_comm();
    download(out, grads_);
  }
  void set_grads(const float* in) override {
    finish_comm();
    upload(grads_, in);
  }
  void get_optimizer_state(float* m, float* v) const override {
    if (zero1_) {
      zero1_->gather(m_, m, grads_, stream_);
      zero1_->gather(v_, v, grads_, stream_);
      return;
    }
    download(m, m_);
    download(v, v_);
  }
  void set_optimizer_state(const float* m, const float* v) override {
    finish_comm();
    if (zero1_) {
      zero1_->scatter(m, m_, stream_);
      zero1_->scatter(v, v_, stream_);
      AISCALE_CUDA_CHECK(cudaStreamSynchronize(stream_));
      return;
    }
    upload(m_, m);
    upload(v_, v);
  }
  float* grad_buffer() override { return grads_; }
  float* param_buffer() override { return master_; }  // ZeRO-1: this rank's shard
  size_t memory_bytes() const override { return arena_bytes_; }
  size_t optimizer_state_bytes() const override { return size_t(3 * 4) * size_t(S_); }
  bool data_parallel() const override { return reducer_ != nullptr; }
  void set_gradient_sync(bool on) override {
    if (reducer_) reducer_->set_sync(on);
  }
  bool collective_state() const override { return zero1_ != nullptr; }

 private:
  enum class LogitsState { valid, gradient, consumed };

  // The data-parallel reducer subscribes to this model's gradients (null without data
  // parallelism on the device); ZeRO-1's optimiser side shards along its buckets.
  void subscribe_reducer(bool fused_norm) {
    parallel::dp::ReducerOptions ro;
    ro.zero_stage = options_.zero_stage;
    ro.overlap = options_.overlap;
    ro.bucket_mib = options_.bucket_mib;
    ro.grad_comm = options_.grad_comm;
    ro.grad_transport = options_.grad_transport;
    ro.timeout_s = options_.comm_timeout_s;
    ro.verbose = verbose_;
    ro.fused_norm = fused_norm;
    reducer_ = parallel::dp::Reducer::create(options_.comm, ro, gpt_gradient_order(layout_), P_,
                                             timer_.get());
    Ppad_ = reducer_ ? reducer_->plan().padded_size : P_;
    S_ = reducer_ ? reducer_->plan().shard_size : P_;
    if (!reducer_) return;
    dp_ = true;
    world_ = reducer_->world();
    rank_ = reducer_->rank();
    overlap_ = reducer_->overlap();
    zero_ = reducer_->zero();
    if (zero_) zero1_ = std::make_unique<optim::Zero1>(*reducer_, P_);
  }

  GptCudaSizes sizes() const {
    GptCudaSizes z;
    z.B = B_, z.T = T_, z.C = C_, z.NH = NH_, z.L = L_, z.V = V_, z.Vp = Vp_, z.N = N_;
    z.es = es_;
    z.recompute = options_.recompute;
    z.S = S_, z.Ppad = Ppad_, z.Pw = Pw_;
    z.cudnn_workspace_bytes = cudnn_attention_ ? cudnn_attention_->workspace_bytes() : 0;
    z.world = world_;
    z.gathered = dp_ && overlap_;
    z.gathers_pushed = reducer_ && reducer_->pushes_gathers();
    z.zero = zero_;
    z.buckets = reducer_ ? reducer_->buckets().size() : 0;
    z.comm_buffer_bytes = reducer_ ? reducer_->comm_buffer_bytes() : 0;
    return z;
  }

  // Backward has queued the work that completes the gradients of `point` on the stream.
  void ready(int point) {
    if (reducer_) reducer_->gradients_ready(point, stream_);
  }
  // Waits (bounded) for the reducer's collectives (e.g. ZeRO-1's all-gather of the weights).
  void finish_comm() const {
    if (reducer_) reducer_->finish();
  }
  // --profile: the op now starting on the model's stream (nullptr: the last one ended).
  void prof_op(const char* name, double flops = 0) {
    if (op_recorder_) op_recorder_->mark(name, flops);
  }
  // AISCALE_CUDA_TIMING.
  void mark(int phase, bool training = true) {
    if (timer_) timer_->mark(phase, stream_, training);
  }
  void lap(int part) {
    if (timer_) timer_->lap(part);
  }
  void collect_phases() {
    if (!timer_ || !timer_->step_complete()) return;
    timer_->collect();
    if (reducer_) reducer_->collect_bucket_times(timer_->backward_start());
    timer_->finish_collect();
  }

  // Flat-order working copy (type t) into the padded layout of work_.
  void copy_flat_to_work(const void* flat, cudaStream_t s) {
    AISCALE_CUDA_CHECK(cudaMemcpyAsync(work_, flat, size_t(V_ * C_) * es_, cudaMemcpyDeviceToDevice, s));
    AISCALE_CUDA_CHECK(cudaMemcpyAsync(at(work_, Vp_ * C_), static_cast<const char*>(flat) + V_ * C_ * int64_t(es_),
                                       size_t(P_ - V_ * C_) * es_, cudaMemcpyDeviceToDevice, s));
  }

  void* at(void* base, int64_t elems) const { return static_cast<char*>(base) + elems * int64_t(es_); }
  // Working-copy (padded layout) parameter pointers.
  int64_t work_layer_off(int64_t l) const { return layout_.layer_begin(l) + (Vp_ - V_) * C_; }
  const void* pw(int64_t l, int64_t off) const { return at(work_, work_layer_off(l) + off); }
  const void* wte_w() const { return work_; }
  const void* wpe_w() const { return at(work_, Vp_ * C_); }
  const void* lnf_w() const { return at(work_, work_layer_off(L_)); }
  const void* lnf_b() const { return at(work_, work_layer_off(L_) + C_); }
  // Gradient (flat layout) pointers.
  int64_t layer_off(int64_t l) const { return layout_.layer_begin(l); }
  int64_t in(P p) const { return layout_.in_layer(p); }
  int64_t lnf_w_off() const { return layer_off(L_); }
  float* g(int64_t off) const { return grads_ + off; }
  void* res(int64_t l) const { return residuals_[static_cast<size_t>(l)]; }

  void check_tokens(const int32_t* x, const char* what) const {
    for (int64_t i = 0; i < N_; ++i)
      if (x[i] < 0 || x[i] >= V_)
        throw Error(std::string(what) + " id " + std::to_string(x[i]) + " at position " +
                    std::to_string(i) + " is outside the vocabulary 0.." + std::to_string(V_ - 1) +
                    ": the data does not match model.vocab_size");
  }

  void download(float* out, const float* src) const {
    AISCALE_CUDA_CHECK(cudaMemcpyAsync(out, src, size_t(P_) * 4, cudaMemcpyDeviceToHost, stream_));
    AISCALE_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  void upload(float* dst, const float* in) {
    AISCALE_CUDA_CHECK(cudaMemcpyAsync(dst, in, size_t(P_) * 4, cudaMemcpyHostToDevice, stream_));
    AISCALE_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }


  GptConfig config_;
  GptRunOptions options_;
  GptLayout layout_;
  DType t_;
  size_t es_;
  int64_t B_, T_, C_, NH_, L_, V_, Vp_, maxT_, N_, P_ = 0, Pw_ = 0;
  AttentionImpl attention_impl_ = AttentionImpl::automatic;
  LinearOptions linear_;
  bool fused_xent_ = true, verbose_ = false, printed_plans_ = false;
  bool lm_head_padded_dw_ = false, autotune_ = true;

  int device_ = 0;
  std::string device_name_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t loss_ready_ = nullptr, buckets_sent_ = nullptr;
  std::unique_ptr<Gemm> gemm_;

  std::unique_ptr<cuda::CudnnAttention> cudnn_attention_;  // AISCALE_CUDA_ATTENTION=cudnn / auto
  int64_t num_unique_ = 0;

  // AISCALE_CUDA_TIMING (null when off); the reducer reports its buckets' times into it.
  std::unique_ptr<profile::StepTimer> timer_;
  std::unique_ptr<profile::GpuOpRecorder> op_recorder_;  // --profile window only
  // Data parallelism (subscribe_reducer): null without it.
  std::unique_ptr<parallel::dp::Reducer> reducer_;
  std::unique_ptr<optim::Zero1> zero1_;
  int64_t world_ = 1, rank_ = 0;
  int64_t Ppad_ = 0, S_ = 0;  // gradient buffer length, master/moment (shard) length
  bool dp_ = false, zero_ = false, overlap_ = true;
  bool has_targets_ = false, forward_done_ = false;
  LogitsState logits_state_ = LogitsState::consumed;
  float grad_multiplier_hint_ = 1.0f;  // dlogits of a fused forward are scaled by this
  float dlogits_multiplier_ = 1.0f;
};

}  // namespace

std::unique_ptr<GptModel> create_gpt_cuda(const GptConfig& c, const GptRunOptions& o,
                                          const std::vector<float>& init_params,
                                          const GptCudaSwitches& switches) {
  return std::make_unique<GptCuda>(c, o, init_params, switches);
}

}  // namespace detail
}  // namespace aiscale::nn
