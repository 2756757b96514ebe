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
// step timing is profile/step_timer.cuh. Tensor parallelism (a tensor group of several
// ranks) is gpt_cuda_tp.cuh: the layers compute on this rank's heads and MLP slice, and the
// row-parallel outputs and column-parallel input gradients are summed over the group; with
// several copies of the tensor group (dp x tp) each rank's gradients are then summed over
// its data-parallel group after backward, without the reducer (with ZeRO-1 reduce-scattered
// into the shards of optim/zero1.cuh instead). Pipeline stages (a pipeline group of several
// ranks) are gpt_cuda_pp.cuh: the activation buffers are sized for one micro-batch, each
// stage runs its layers over the micro-batches in its schedule's order (recomputing a
// micro-batch's stage forward before its backward) and the stages' gradients are summed
// over the job's ranks after backward. The environment variables
// read here are listed, with what each is for, in core/env.cpp.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "aiscale/nn/models/gpt_adamw_layout.cuh"
#include "aiscale/nn/models/gpt_cuda_model.cuh"
#include "aiscale/nn/models/gpt_rope.h"
#include "aiscale/ops/cuda/common.cuh"

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
// train.attention (or bench --attention) when it names kernels, else
// AISCALE_CUDA_ATTENTION, else automatic.
// (make_gpt has checked the option's value; the variable's is checked here.)
// Pipeline stages compute one micro-batch at a time: the activations are sized for it.
int64_t rows_per_pass(const GptRunOptions& o, const parallel::Communicator* pipeline_group,
                      const GptCudaPipelinePlan& plan) {
  return pipeline_group ? o.batch / plan.microbatches : o.batch;
}

AttentionImpl choose_attention(const std::string& option, const std::string& variable) {
  static constexpr std::pair<const char*, AttentionImpl> kNames[] = {
      {"auto", AttentionImpl::automatic}, {"cudnn", AttentionImpl::cudnn},
      {"flash", AttentionImpl::flash},    {"simple", AttentionImpl::simple}};
  const std::string name = option != "auto" ? option : variable;
  for (const auto& [n, impl] : kNames)
    if (name == n) return impl;
  throw Error("AISCALE_CUDA_ATTENTION = '" + name +
              "': use auto, cudnn, flash or simple");
}

}  // namespace

GptCuda::GptCuda(const GptConfig& c, const GptRunOptions& o, const GptCudaSwitches& sw, parallel::Communicator* tensor_group,
                 parallel::Communicator* data_group, parallel::Communicator* pipeline_group,
                 const GptCudaPipelinePlan& plan)
    : config_(c),
      options_(o),
      layout_(c),
      shard_(c, tensor_group ? tensor_group->world() : 1, tensor_group ? tensor_group->rank() : 0,
             sw.vocab_parallel, pipeline_group ? plan.layer_begin : 0,
             pipeline_group ? plan.layer_end : -1,
             gpu_vocab_align(c.vocab_size, tensor_group ? tensor_group->world() : 1)),
      t_(o.precision),
      es_(dtype_size(o.precision)),
      B_(rows_per_pass(o, pipeline_group, plan)),
      T_(o.seq),
      C_(c.n_embd),
      NH_(c.n_head),
      L_(c.n_layer),
      V_(shard_.vocab_slice()),
      Vp_(shard_.vocab_parallel() ? shard_.vocab_slice() : (c.vocab_size + 127) / 128 * 128),
      maxT_(c.block_size),
      N_(rows_per_pass(o, pipeline_group, plan) * o.seq),
      pipeline_(pipeline_group),
      data_group_(pipeline_group ? data_group : nullptr) {
  const int64_t tp = shard_.tp();
  Cl_ = C_ / tp;
  NHl_ = NH_ / tp;
  Fl_ = c.ffn() / tp;
  llama_ = c.llama();
  HS_ = C_ / NH_;
  KVl_ = c.kv_heads() / tp;
  QKVl_ = c.qkv_rows() / tp;
  norm_eps_ = static_cast<float>(c.norm_eps);
  P_ = shard_.size();
  Pw_ = P_ + (Vp_ - V_) * C_;
  if (llama_) {
    llama_check_layout(tensor_group != nullptr, pipeline_group != nullptr);
    // An untied LM head follows the final norm (which has no bias here); its padded rows
    // are a zero tail of the working copy.
    if (!c.tied()) {
      lm_head_off_ = shard_.lnf_w() + C_;
      Pw_ += (Vp_ - V_) * C_;
    }
  }
  attention_impl_ = choose_attention(options_.attention, sw.attention);
  // Only where the padded rows land inside wpe's gradient.
  lm_head_padded_dw_ = maxT_ >= Vp_ - V_ && !llama_;
  // Under tensor parallelism the ranks must pick the same GEMM algorithms, so that the
  // replicated computations (LM head, LayerNorms' inputs) stay bitwise equal: no timing.
  autotune_ = sw.autotune && tp == 1;
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
      cudnn_attention_ = std::make_unique<cuda::CudnnAttention>(t_, B_, T_, NHl_, C_ / NH_, KVl_);
    } catch (const Error& e) {
      if (attention_impl_ == AttentionImpl::cudnn) throw;
      std::fprintf(stderr, "[aiscale cuda] cuDNN attention unavailable, using flash: %s\n",
                   e.what());
    }
  }
  if (tensor_group)
    tp_ = std::make_unique<GptCudaTensorParallel>(*tensor_group, data_group, shard_, t_, stream_);
  sp_ = tp_ && o.sequence_parallel;
  if (sp_) {
    AISCALE_CUDA_REQUIRE(N_ % shard_.tp() == 0,
                         "sequence parallelism: the tokens must split over the tensor ranks");
    const int64_t C = C_;
    AISCALE_CUDA_REQUIRE(shard_.in_layer(P::ln1_b) == shard_.in_layer(P::ln1_w) + C &&
                             shard_.in_layer(P::ln2_b) == shard_.in_layer(P::ln2_w) + C,
                         "sequence parallelism packs each LayerNorm's weight and bias together");
  }
  subscribe_reducer(sw.fused_norm);
  if (zero3_ && !llama_) lm_head_padded_dw_ = true;  // its gradients have the padded rows
  allocate(sizes());
  if (zero3_) {
    Zero3::Buffers b;
    b.master = master_, b.m = m_, b.v = v_, b.grads = grads_, b.work = work_;
    b.resident = z3_resident_;
    b.slots = z3_slots_;
    for (int i = 0; i < 3; ++i) b.layer_grads[i] = z3_layer_grads_[i];
    b.resident_grads = z3_resident_grads_;
    b.sum_squares = sumsq_dev_;
    b.sum_squares_scratch = sumsq_scratch_;
    b.host_sum_squares = h_sumsq_;
    zero3_->connect(b, stream_);
  }
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
  if (o.fp8) {
    if (prop.major * 10 + prop.minor < 89)
      throw Error("train.precision = \"fp8\" needs a GPU with FP8 tensor cores (compute "
                  "capability 8.9 or newer: Ada, Hopper, Blackwell); " + device_name_ +
                  " has " + std::to_string(prop.major) + "." + std::to_string(prop.minor) +
                  ": use precision \"bf16\"");
    AISCALE_CUDA_REQUIRE(t_ == DType::bf16, "FP8 linear layers need bf16 activations");
    // One linear layer's operands at a time: its widest input or output over N_ rows.
    const int64_t widest = std::max({C_, QKVl_, Cl_, llama_ ? 2 * Fl_ : Fl_});
    const int64_t weights = std::max({QKVl_ * C_, C_ * Cl_, (llama_ ? 2 : 1) * Fl_ * C_});
    fp8_ = std::make_unique<cuda::Fp8Training>(4 * L_, N_ * widest, weights, o.fp8_history,
                                               o.fp8_margin);
    fp8_->set_marker([this](const char* op, double flops) { prof_op(op, flops); });
  }

  // Parameters: master copy, working copy (padded vocabulary rows are zero), state.
  AISCALE_CUDA_CHECK(cudaMemsetAsync(arena_, 0, arena_bytes_, stream_));
  if (llama_) {  // the rotary table (read-only from here on)
    // (T, HS/2) cosines, then (T, HS/2) sines: cuda::rotary_apply's table, from the one
    // definition of the frequencies (gpt_rope.h) the CPU model uses.
    const RopeTable rope = rope_table(c, T_);
    std::vector<float> table(rope.cos);
    table.insert(table.end(), rope.sin.begin(), rope.sin.end());
    AISCALE_CUDA_CHECK(cudaMemcpyAsync(rope_table_, table.data(), table.size() * 4,
                                       cudaMemcpyHostToDevice, stream_));
  }
  init_params();  // the seed's weights, a range at a time (gpt_cuda_stream.cu)
  // The warm-up step communicates nothing between data-parallel copies.
  set_gradient_sync(false);
  warm_up();
  set_gradient_sync(true);
  // FP8: the warm-up's amaxes give the first step's scales.
  if (fp8_) fp8_->update_scales(stream_);
  if (pipeline_) {
    GptCudaPipelineSizes z;
    z.tokens = o.batch * o.seq;
    z.boundary_bytes = boundary_rows() * C_ * int64_t(es_);
    z.bucket_ints = bucket_ints();
    pp_ = std::make_unique<GptCudaPipeline>(*pipeline_, plan, z);
  }
  // The warm-up forward (GEMM autotuning, first launches) is not a training step.
  if (timer_) timer_->forget();
  if (verbose_) {
    std::fprintf(stderr,
                 "[aiscale cuda] %s, %s, B=%lld T=%lld, arena %.2f GiB, attention %s, "
                 "fused gelu %d, dgelu %d, bgrad %d, lm-head pad %d, autotune %d, "
                 "recompute %d, recompute layers %d, fp8 %d\n",
                 device_name_.c_str(), cuda::dtype_str(t_),
                 static_cast<long long>(B_), static_cast<long long>(T_),
                 double(arena_bytes_) / double(1 << 30),
                 attention_kernels().c_str(),
                 int(linear_.fused_gelu), int(linear_.fused_dgelu), int(linear_.fused_bgrad),
                 int(lm_head_padded_dw_), int(autotune_),
                 int(options_.recompute), int(options_.recompute_layers), int(fp8_ != nullptr));
  }
}

GptCuda::~GptCuda() {
  if (timer_ && timer_->report(rank_) && reducer_) reducer_->report_bucket_times();
  zero1_.reset();
  zero3_.reset();  // waits for its collectives
  tp_.reset();     // waits for its all-reduces
  pp_.reset();     // waits for its sends and receives
  reducer_.reset();  // waits for its collectives; unmaps the peers' buffers (copy engines)
  timer_.reset();
  gemm_.reset();
  release();
  if (loss_ready_) cudaEventDestroy(loss_ready_);
  if (buckets_sent_) cudaEventDestroy(buckets_sent_);
  if (stream_) cudaStreamDestroy(stream_);
}

void GptCuda::warm_up() {
  std::vector<int32_t> in(static_cast<size_t>(N_)), tg(static_cast<size_t>(N_));
  uint64_t x = 0x9e3779b97f4a7c15ull;
  for (int64_t i = 0; i < N_; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    in[static_cast<size_t>(i)] = static_cast<int32_t>(x % static_cast<uint64_t>(config_.vocab_size));
    tg[static_cast<size_t>(i)] =
        static_cast<int32_t>((x >> 32) % static_cast<uint64_t>(config_.vocab_size));
  }
  gemm_->set_autotune(autotune_);
  forward_batch(in.data(), tg.data());
  backward_batch(1.0f);
  gemm_->set_autotune(false);
  zero_grad();
  AISCALE_CUDA_CHECK(cudaStreamSynchronize(stream_));
  has_targets_ = false;
  forward_done_ = false;
  logits_state_ = LogitsState::consumed;
  grad_multiplier_hint_ = 1.0f;
  dlogits_multiplier_ = 1.0f;
}

float GptCuda::forward_batch(const int32_t* inputs, const int32_t* targets) {
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
  const int64_t N = N_;
  cudaStream_t s = stream_;
  if (gather_tokens) reducer_->gather_inputs(tokens_all_, h_tokens_all_, d_tokens_, N * 4);

  mark(profile::StepTimer::kForward, targets != nullptr);
  prof_op("embedding_forward");
  if (zero3_) zero3_->begin_pass();
  embedding_forward(d_inputs);
  layers_forward(lb(), le());
  head_forward();
  prof_op(nullptr);
  forward_done_ = true;
  if (!targets) {
    logits_state_ = LogitsState::valid;
    if (tp_) tp_->finish();
    AISCALE_CUDA_CHECK(cudaStreamSynchronize(s));
    return std::numeric_limits<float>::quiet_NaN();
  }
  // Loss (and, fused, dlogits scaled for the expected grad_multiplier).
  loss_forward(d_targets, grad_multiplier_hint_, loss_dev_);
  AISCALE_CUDA_CHECK(cudaMemcpyAsync(h_loss_, loss_dev_, 4, cudaMemcpyDeviceToHost, s));
  AISCALE_CUDA_CHECK(cudaEventRecord(loss_ready_, s));
  if (timer_) timer_->mark_forward_end(s);
  lap(0);
  // While the GPU runs the forward pass: group token positions for embedding backward.
  AISCALE_CUDA_CHECK(cudaEventSynchronize(buckets_sent_));  // staging free again
  if (gather_tokens) {
    finish_comm();  // every rank's tokens are in h_tokens_all_
    lap(1);
    num_unique_ = cuda::build_token_buckets(h_tokens_all_, world_ * N, config_.vocab_size,
                                            h_unique_, h_offsets_, h_positions_, bucket_counts_);
  } else {
    lap(1);
    num_unique_ = cuda::build_token_buckets(inputs, N, shard_.vocab_rows(), h_unique_, h_offsets_,
                                            h_positions_, bucket_counts_, shard_.vocab_begin());
  }
  AISCALE_CUDA_CHECK(cudaMemcpyAsync(d_buckets_, h_buckets_, bucket_ints() * 4,
                                     cudaMemcpyHostToDevice, s));
  AISCALE_CUDA_CHECK(cudaEventRecord(buckets_sent_, s));
  lap(2);
  if (tp_) tp_->finish();  // bounded: a stopped peer fails here, not in the wait below
  AISCALE_CUDA_CHECK(cudaEventSynchronize(loss_ready_));
  lap(3);
  return *h_loss_;
}

// Layers [l0, l1) forward: res(l0) in, res(l1) out.
void GptCuda::layers_forward(int64_t l0, int64_t l1) {
  for (int64_t l = l0; l < l1; ++l) {
    use_layer(l, +1);
    layer_forward(l);
  }
}

void GptCuda::layer_forward(int64_t l) {
  if (llama_) {
    llama_layer_forward(l);
    return;
  }
  const int64_t N = N_, C = C_, B = B_, T = T_, Cl = Cl_, NHl = NHl_, Fl = Fl_;
  const int64_t R = sp_ ? sp_n() : N;  // rows of the residual stream here
  cudaStream_t s = stream_;
  Acts& a = acts_[l];
  prof_op("layernorm_forward");
  cuda::layernorm_forward(t_, sp_ ? sp_block(a.ln1) : a.ln1, a.ln1_mean, a.ln1_rstd, res(l),
                          pw(l, in(P::ln1_w)), pw(l, in(P::ln1_b)), R, C, s);
  if (sp_) {
    prof_op("tensor_allgather");
    tp_->allgather(a.ln1, R * C);
  }
  prof_op("matmul_forward", 6.0 * N * C * Cl);
  linear_forward(l, Linear::qkv, a.qkv, nullptr, a.ln1, pw(l, in(P::qkv_w)), pw(l, in(P::qkv_b)),
                 nullptr, C, 3 * Cl);
  prof_op("attention_forward", 2.0 * B * T * T * Cl);
  if (cudnn_attention_)
    cudnn_attention_->forward(a.atty, a.lse, a.qkv, cudnn_workspace_, s);
  else
    cuda::attention_forward(t_, a.atty, a.lse, a.qkv, B, T, Cl, NHl, attention_impl_, s);
  prof_op("matmul_forward", 2.0 * N * C * Cl);
  if (sp_) {  // partial sums (rank 0 adds the bias), reduce-scattered, plus the residual
    linear_forward(l, Linear::proj, sp_full_, nullptr, a.atty, pw(l, in(P::proj_w)),
                   row_add(pw(l, in(P::proj_b))), nullptr, Cl, C);
    prof_op("tensor_reduce_scatter");
    void* sum = sp_reduce(sp_full_);
    prof_op("residual_forward");
    cuda::residual_forward(t_, a.res_mid, sum, res(l), R * C, s);
  } else {
    linear_forward(l, Linear::proj, a.res_mid, nullptr, a.atty, pw(l, in(P::proj_w)),
                   row_add(pw(l, in(P::proj_b))), row_add(res(l)), Cl, C);
    if (tp_) prof_op("tensor_allreduce");
    tp_sum(a.res_mid);
  }
  prof_op("layernorm_forward");
  cuda::layernorm_forward(t_, sp_ ? sp_block(a.ln2) : a.ln2, a.ln2_mean, a.ln2_rstd, a.res_mid,
                          pw(l, in(P::ln2_w)), pw(l, in(P::ln2_b)), R, C, s);
  if (sp_) {
    prof_op("tensor_allgather");
    tp_->allgather(a.ln2, R * C);
  }
  prof_op("matmul_forward", 2.0 * N * C * Fl);
  linear_forward(l, Linear::fc, a.fc_gelu, a.fc_pre, a.ln2, pw(l, in(P::fc_w)), pw(l, in(P::fc_b)),
                 nullptr, C, Fl);
  prof_op("matmul_forward", 2.0 * N * C * Fl);
  if (sp_) {
    linear_forward(l, Linear::fcproj, sp_full_, nullptr, a.fc_gelu, pw(l, in(P::fcproj_w)),
                   row_add(pw(l, in(P::fcproj_b))), nullptr, Fl, C);
    prof_op("tensor_reduce_scatter");
    void* sum = sp_reduce(sp_full_);
    prof_op("residual_forward");
    cuda::residual_forward(t_, res(l + 1), sum, a.res_mid, R * C, s);
  } else {
    linear_forward(l, Linear::fcproj, res(l + 1), nullptr, a.fc_gelu, pw(l, in(P::fcproj_w)),
                   row_add(pw(l, in(P::fcproj_b))), row_add(a.res_mid), Fl, C);
    if (tp_) prof_op("tensor_allreduce");
    tp_sum(res(l + 1));
  }
  acts_layer_ = l;
}

void GptCuda::linear_forward(int64_t l, Linear j, void* out, void* pre_gelu, const void* inp,
                             const void* weight, const void* bias, const void* residual,
                             int64_t C, int64_t OC) {
  if (fp8_ && fp8_->forward(*gemm_, t_, fp8_id(l, j), out, pre_gelu, inp, weight, bias, residual,
                            N_, C, OC, linear_, stream_))
    return;
  cuda::linear_forward(*gemm_, t_, out, pre_gelu, inp, weight, bias, residual, N_, C, OC, linear_,
                       stream_);
}

// The token and position embeddings of N tokens (device ids) into res(0); under sequence
// parallelism every row into sp_final_, then this rank's rows into res(0). With the
// vocabulary split over the tensor ranks each rank looks up the tokens it holds (zeros for
// the others, the position embedding added by rank 0 only) and the sum over the ranks
// (all-reduced, or under sequence parallelism reduce-scattered to the rank's rows) is the
// embedding.
void GptCuda::embedding_forward(const int32_t* d_inputs) {
  cudaStream_t s = stream_;
  const bool split = shard_.vocab_parallel();
  void* out = sp_ ? sp_final_ : res(0);
  cuda::embedding_forward(t_, out, d_inputs, wte_w(), split && shard_.rank() > 0 ? nullptr : wpe_w(),
                          B_, T_, C_, s, shard_.vocab_begin(), shard_.vocab_rows());
  if (split) prof_op(sp_ ? "tensor_reduce_scatter" : "tensor_allreduce");
  if (!sp_) {
    if (split) tp_sum(out);
    return;
  }
  const void* mine = split ? sp_reduce(sp_final_) : sp_block(sp_final_);
  AISCALE_CUDA_CHECK(cudaMemcpyAsync(res(0), mine, size_t(sp_n() * C_) * es_,
                                     cudaMemcpyDeviceToDevice, s));
}

// Sequence parallelism's exchanges (gpt_cuda_model.cuh).
void GptCuda::sp_gather(void* full, const void* local) {
  const int64_t count = sp_n() * C_;
  void* mine = sp_block(full);
  if (mine != local)
    AISCALE_CUDA_CHECK(
        cudaMemcpyAsync(mine, local, size_t(count) * es_, cudaMemcpyDeviceToDevice, stream_));
  tp_->allgather(full, count);
}

void* GptCuda::sp_reduce(void* full) {
  tp_->reduce_scatter(full, sp_n() * C_);
  return sp_block(full);
}

// The loss of the last head_forward into the device float *loss, and dlogits scaled for
// grad_multiplier in place of the logits (backward rescales them for its own multiplier).
void GptCuda::loss_forward(const int32_t* d_targets, float grad_multiplier, float* loss) {
  const int64_t N = N_;
  dlogits_multiplier_ = grad_multiplier;
  prof_op("softmax_xent_forward");
  softmax_xent(d_targets, dlogits_multiplier_ / static_cast<float>(N), true);
  logits_state_ = LogitsState::gradient;
  prof_op("mean_reduce");
  cuda::mean_reduce(loss, losses_, N, stream_);
  prof_op(nullptr);
}

// The softmax cross-entropy of logits_ (losses_, and with write_grad dlogits in place):
// over the whole vocabulary, or with the vocabulary split over the tensor ranks from every
// rank's per-row statistics (collective over the tensor group).
void GptCuda::softmax_xent(const int32_t* d_targets, float dscale, bool write_grad) {
  if (!shard_.vocab_parallel()) {
    cuda::softmax_xent(t_, losses_, logits_, d_targets, N_, V_, Vp_, dscale, write_grad, stream_);
    return;
  }
  const int tp = shard_.tp();
  cuda::softmax_xent_stats(t_, xent_stats_ + int64_t(shard_.rank()) * N_ * 3, logits_, d_targets,
                           N_, shard_.vocab_rows(), Vp_, shard_.vocab_begin(), stream_);
  tp_->allgather_f32(xent_stats_, N_ * 3);
  cuda::softmax_xent_split(t_, losses_, logits_, d_targets, xent_stats_, tp, N_,
                           shard_.vocab_rows(), Vp_, shard_.vocab_begin(), dscale, write_grad,
                           stream_);
}

// The final LayerNorm and the LM head: res(le()) in (res(L) but in a pipeline stage's
// warm-up; under sequence parallelism every rank's rows of it, gathered), logits out.
void GptCuda::head_forward() {
  if (llama_) {
    llama_head_forward();
    return;
  }
  const int64_t N = N_, C = C_;
  cudaStream_t s = stream_;
  if (sp_) {  // the last residual's rows gathered: the head runs on all of them
    prof_op("tensor_allgather");
    sp_gather(sp_final_, res(le()));
  }
  prof_op("layernorm_forward");
  cuda::layernorm_forward(t_, lnf_, lnf_mean_, lnf_rstd_, head_in(), lnf_w(), lnf_b(), N, C, s);
  prof_op("matmul_forward", 2.0 * N * C * Vp_);
  cuda::linear_forward(*gemm_, t_, logits_, nullptr, lnf_, wte_w(), nullptr, nullptr, N, C,
                       Vp_, linear_, s);
}

void GptCuda::set_profiler(profile::OpProfiler* p) {
  op_recorder_.reset();
  if (p) op_recorder_ = std::make_unique<profile::GpuOpRecorder>(*p, stream_, profile::kGpuTrack,
                                                                 "GPU: model stream");
  if (reducer_) reducer_->set_profiler(p);  // the communicator's stream, its own track
}

void GptCuda::logits_at(int64_t b, int64_t t, float* out) {
  if (pp_)
    throw Error("the logits of a pipeline are on its last stage only: sample with "
                "parallel.pipeline_parallel = 1");
  if (shard_.vocab_parallel())
    throw Error("the logits are split over the tensor ranks' vocabulary slices: sample with "
                "parallel.tensor_parallel = 1");
  if (!forward_done_) throw Error("logits are not available: run forward() first");
  if (b < 0 || b >= B_ || t < 0 || t >= T_)
    throw Error("logits_at(" + std::to_string(b) + ", " + std::to_string(t) +
                ") is outside the batch");
  const int64_t row = b * T_ + t;
  if (logits_state_ == LogitsState::valid) {
    cuda::cast_to_f32(t_, logits_row_, at(logits_, row * Vp_), V_, stream_);
  } else {
    // The logits were overwritten by their gradient: recompute this row from ln_f.
    cuda::logits_row(t_, logits_row_, at(lnf_, row * C_), head_w(), V_, C_, stream_);
  }
  AISCALE_CUDA_CHECK(cudaMemcpyAsync(out, logits_row_, size_t(V_) * 4, cudaMemcpyDeviceToHost,
                                     stream_));
  AISCALE_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

std::unique_ptr<GptModel> create_gpt_cuda(const GptConfig& c, const GptRunOptions& o,
                                          const GptCudaSwitches& switches,
                                          parallel::Communicator* tensor_group,
                                          parallel::Communicator* data_group,
                                          parallel::Communicator* pipeline_group,
                                          const GptCudaPipelinePlan& plan) {
  return std::make_unique<GptCuda>(c, o, switches, tensor_group, data_group, pipeline_group,
                                   plan);
}

}  // namespace detail
}  // namespace aiscale::nn
