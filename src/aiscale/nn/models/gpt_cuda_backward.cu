// The CUDA GPT model's backward pass (the class: gpt_cuda_model.cuh; the model:
// gpt_cuda.cu).
#include <cuda_runtime.h>

#include <cstdio>

#include "aiscale/nn/models/gpt_cuda_model.cuh"
#include "aiscale/ops/cuda/common.cuh"

namespace aiscale::nn::detail {

void GptCuda::backward_batch(float grad_multiplier) {
  if (!has_targets_ || logits_state_ == LogitsState::consumed)
    throw Error("backward() needs a forward() with targets before it");
  const int64_t N = N_, C = C_, B = B_, T = T_;
  cudaStream_t s = stream_;
  mark(profile::StepTimer::kBackward);
  if (zero3_) zero3_->begin_backward();
  head_backward(grad_multiplier);
  const bool overlapped = reducer_ && reducer_->overlapping();
  layers_backward(lb(), le(), false);
  const int64_t Nb = bucket_capacity();
  mark(profile::StepTimer::kAfterLayer0);
  if (overlapped) {
    // Every rank's d(res0): the embedding backward over all ranks' positions adds the
    // summed embedding gradient, once the buckets holding wte and wpe are reduced.
    prof_op("allgather_input_gradients");
    reducer_->gather_input_gradients(dres_all_, dres_, N * C * int64_t(es_));
    prof_op("embedding_backward");
    cuda::embedding_backward(t_, grads_, g_wpe(), dres_all_, d_buckets_, d_buckets_ + Nb,
                             d_buckets_ + 2 * Nb + 1, num_unique_, world_ * B, T, C, s);
  } else {
    if (sp_) {  // every rank's rows of d res(0): the embedding backward over all of them
      prof_op("tensor_allgather");
      sp_gather(sp_full_, dres_);
    }
    prof_op("embedding_backward");
    cuda::embedding_backward(t_, g_wte(), g_wpe(), sp_ ? sp_full_ : dres_, d_buckets_,
                             d_buckets_ + Nb, d_buckets_ + 2 * Nb + 1, num_unique_, B, T, C, s);
    ready(parallel::dp::kAfterBackward);  // one bucket: everything
    if (zero3_) zero3_->resident_backward_done();
  }
  if (sp_ && tp_sync_ && !zero3_) sp_sum_norm_grads();  // (ZeRO-2/3: layer by layer)
  // dp x tp: the copies' local gradients summed (ZeRO-2/3: reduce-scattered layer by layer).
  if (tp_ && tp_->dp() > 1 && tp_sync_ && !zero3_) {
    if (zero1_) {  // ZeRO-1: each data rank keeps the sums of its part
      prof_op("reduce_scatter_gradients");
      zero1_->reduce_scatter(grads_, s);
    } else {
      prof_op("allreduce_gradients");
      tp_->sum_gradients(grads_, P_);
    }
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

// The LM head's and the final LayerNorm's backward: dlogits (written in place of the
// logits by loss_forward) in, dres_ = d res(L) out.
void GptCuda::head_backward(float grad_multiplier) {
  const int64_t N = N_, C = C_;
  cudaStream_t s = stream_;
  if (logits_state_ != LogitsState::gradient)
    throw Error("internal: the LM head's backward runs before the loss's forward");
  const float alpha = grad_multiplier / dlogits_multiplier_;
  grad_multiplier_hint_ = grad_multiplier;
  logits_state_ = LogitsState::consumed;
  if (llama_) {
    llama_head_backward(alpha);
    return;
  }

  // LM head (tied to wte): over the padded vocabulary for dlnf (padded rows of the
  // weight and of dlogits are zero), over the real rows for dwte.
  prof_op("matmul_backward", 2.0 * N * C * Vp_);
  cuda::linear_backward_input(*gemm_, t_, dln_, logits_, wte_w(), N, C, Vp_, Vp_, alpha,
                              nullptr, nullptr, bias_scratch_, linear_, s);
  if (shard_.vocab_parallel()) {  // each rank's vocabulary slice's part of d ln_f
    prof_op("tensor_allreduce");
    tp_sum(dln_);
  }
  // dwte over the real V rows; or, measured option, over all Vp rows: the padded rows
  // then add exact zeros (dlogits is 0 there) to the first gradients of wpe, which
  // follow wte in the flat buffer, and the GEMM's n is a multiple of 128.
  prof_op("matmul_backward", 2.0 * N * C * V_);
  cuda::linear_backward_weight(*gemm_, t_, g_wte(), nullptr, logits_, lnf_, N, C,
                               lm_head_padded_dw_ ? Vp_ : V_, Vp_, alpha, bias_scratch_,
                               linear_, s);
  ready(kGptAfterLmHead);
  prof_op("layernorm_backward");
  // (Under sequence parallelism the last layer's projection bias gradient comes from the
  // gathered gradient in layers_backward, like every other row-parallel bias.)
  cuda::layernorm_backward(t_, dres_, g_lnf(0), g_lnf(1),
                           le() > lb() && !sp_ ? gl(le() - 1, P::fcproj_b) : nullptr, dln_,
                           head_in(), lnf_w(), lnf_mean_, lnf_rstd_, N, C, false, ln_scratch_, s);
  if (sp_ && shard_.rank() > 0)  // this rank's rows of d res(L) to the front of dres_
    AISCALE_CUDA_CHECK(cudaMemcpyAsync(dres_, sp_block(dres_), size_t(sp_n() * C) * es_,
                                       cudaMemcpyDeviceToDevice, s));
}

// Layer l's MLP backward: dout = d res(l + 1) (N rows) in, the MLP's weight and bias
// gradients added (the projection's bias from dout's column sums only when `proj_bias`:
// else the LayerNorm backward that produced dout gives it), dln_ = d of the MLP's input
// (ln2's output; partial sums over the tensor ranks under tensor parallelism) out.
void GptCuda::mlp_backward(int64_t l, const void* dout, bool proj_bias) {
  const int64_t C = C_, Fl = Fl_;
  Acts& a = acts_[l];
  // MLP projection; its input gradient through the GELU, whose bias gradient that gives.
  linear_backward(l, Linear::fcproj, Fl, C, gl(l, P::fcproj_w),
                  proj_bias ? gl(l, P::fcproj_b) : nullptr, pw(l, in(P::fcproj_w)), dout,
                  a.fc_gelu, dfc_, std::nullopt, a.fc_pre, gl(l, P::fc_b));
  // MLP first layer (column-parallel: its input gradient is summed over the tensor ranks).
  linear_backward(l, Linear::fc, C, Fl, gl(l, P::fc_w), nullptr, pw(l, in(P::fc_w)), dfc_, a.ln2,
                  dln_);
}

void GptCuda::linear_backward(int64_t l, Linear j, int64_t C, int64_t OC, float* dweight,
                              float* dbias, const void* weight, const void* dout, const void* inp,
                              void* dinp, std::optional<int> ready_point, const void* gelu_pre,
                              float* dbias_gelu) {
  cudaStream_t s = stream_;
  prof_op("matmul_backward", 2.0 * N_ * C * OC);
  float* bias = dbias ? bias_tmp_ : nullptr;
  const bool fp8 = fp8_ && fp8_->backward_weight(*gemm_, t_, fp8_id(l, j), dweight, bias, dout, inp,
                                                 N_, C, OC, bias_scratch_, s);
  if (!fp8)
    cuda::linear_backward_weight(*gemm_, t_, dweight, bias, dout, inp, N_, C, OC, OC, 1.0f,
                                 bias_scratch_, linear_, s);
  if (dbias) {
    prof_op("add_inplace");
    cuda::add_inplace(dbias, bias_tmp_, OC, s);
  }
  if (ready_point) ready(*ready_point);
  prof_op("matmul_backward", 2.0 * N_ * C * OC);
  float* gelu_bias = dbias_gelu ? bias_tmp_ : nullptr;
  if (!(fp8 && fp8_->backward_input(*gemm_, t_, fp8_id(l, j), dinp, weight, N_, C, OC, gelu_pre,
                                    gelu_bias, bias_scratch_, s)))
    cuda::linear_backward_input(*gemm_, t_, dinp, dout, weight, N_, C, OC, OC, 1.0f, gelu_pre,
                                gelu_bias, bias_scratch_, linear_, s);
  if (dbias_gelu) {
    prof_op("add_inplace");
    cuda::add_inplace(dbias_gelu, bias_tmp_, C, s);
  }
}

// Layer l's attention and QKV projection backward: datty_ (d of the attention output) in,
// the QKV weight and bias gradients added, dln_ = d of the QKV input (ln1's output; partial
// sums over the tensor ranks under tensor parallelism) out.
void GptCuda::attention_qkv_backward(int64_t l) {
  const int64_t C = C_, B = B_, T = T_, Cl = Cl_, NHl = NHl_;
  cudaStream_t s = stream_;
  Acts& a = acts_[l];
  prof_op("attention_backward", 4.0 * B * T * T * Cl);
  if (cudnn_attention_)
    cudnn_attention_->backward(dqkv_, datty_, a.qkv, a.atty, a.lse, dq_accum_, delta_,
                               cudnn_workspace_, s);
  else
    cuda::attention_backward(t_, dqkv_, datty_, a.qkv, a.atty, a.lse, B, T, Cl, NHl,
                             dq_accum_, delta_, attention_impl_, s);
  linear_backward(l, Linear::qkv, C, 3 * Cl, gl(l, P::qkv_w), gl(l, P::qkv_b),
                  pw(l, in(P::qkv_w)), dqkv_, a.ln1, dln_,
                  l == 0 ? std::optional<int>(kGptLayer0Qkv) : std::nullopt);
}

GptCuda::Acts& GptCuda::begin_layer_backward(int64_t l) {
  Acts& a = acts_[l];
  use_layer(l, -1);
  if (zero3_ && l > 0) zero3_->prepare_layer_grads(l - 1);
  // Full recomputation: the layer's forward again from its input, kept in res(l) (the
  // top layer's activations are still there after forward).
  if (options_.recompute_layers && acts_layer_ != l) layer_forward(l);
  acts_layer_ = -1;  // backward reuses the set's buffers
  return a;
}

// Layers [l1 - 1 .. l0] backward: dres_ = d res(l1) in, d res(l0) out. bias_from_dres: the
// bias gradient of layer l1 - 1's MLP projection is the column sums of dres_ itself (a
// pipeline stage's received gradient; else the final LayerNorm's backward made them).
void GptCuda::layers_backward(int64_t l0, int64_t l1, bool bias_from_dres) {
  if (llama_) {
    llama_layers_backward(l0, l1);
    return;
  }
  if (sp_) {
    layers_backward_sp(l0, l1);
    return;
  }
  const int64_t N = N_, C = C_, Cl = Cl_, Fl = Fl_;
  cudaStream_t s = stream_;
  for (int64_t l = l1 - 1; l >= l0; --l) {
    Acts& a = begin_layer_backward(l);
    if (recompute_norms()) {
      prof_op("layernorm_forward");
      cuda::layernorm_forward(t_, a.ln1, a.ln1_mean, a.ln1_rstd, res(l), pw(l, in(P::ln1_w)),
                              pw(l, in(P::ln1_b)), N, C, s);
      prof_op("layernorm_forward");
      cuda::layernorm_forward(t_, a.ln2, a.ln2_mean, a.ln2_rstd, a.res_mid, pw(l, in(P::ln2_w)),
                              pw(l, in(P::ln2_b)), N, C, s);
      prof_op("gelu_forward");
      cuda::gelu_forward(t_, a.fc_gelu, a.fc_pre, N * Fl, s);
    }
    // MLP projection: dres = d(res[l + 1]); its bias gradient came from the LayerNorm
    // backward that produced dres.
    mlp_backward(l, dres_, bias_from_dres && l == l1 - 1);
    if (tp_) prof_op("tensor_allreduce");
    tp_sum(dln_);
    prof_op("layernorm_backward");
    cuda::layernorm_backward(t_, dres_, gl(l, P::ln2_w), gl(l, P::ln2_b),
                             gl(l, P::proj_b), dln_, a.res_mid, pw(l, in(P::ln2_w)),
                             a.ln2_mean, a.ln2_rstd, N, C, true, ln_scratch_, s);
    if (l == 0) ready(kGptLayer0Mlp);
    // Attention projection: dres = d(res_mid).
    linear_backward(l, Linear::proj, Cl, C, gl(l, P::proj_w), nullptr, pw(l, in(P::proj_w)), dres_,
                    a.atty, datty_);
    attention_qkv_backward(l);
    if (tp_) prof_op("tensor_allreduce");
    tp_sum(dln_);
    // (The bias of layer l0 - 1 belongs to the previous pipeline stage, which takes the
    // column sums of the gradient it receives: bias_from_dres.)
    prof_op("layernorm_backward");
    cuda::layernorm_backward(t_, dres_, gl(l, P::ln1_w), gl(l, P::ln1_b),
                             l > l0 ? gl(l - 1, P::fcproj_b) : nullptr, dln_, res(l),
                             pw(l, in(P::ln1_w)), a.ln1_mean, a.ln1_rstd, N, C, true,
                             ln_scratch_, s);
    // (Without ZeRO the reducer holds layer 0's last part back until d(res0) is queued.)
    ready(static_cast<int>(l));
    if (zero3_) zero3_->layer_backward_done(l);
  }
}

// The same under sequence parallelism (gpt_cuda_model.cuh): dres_'s first n rows hold this
// rank's rows of d res(l1) in and of d res(l0) out. Each row-parallel layer's output
// gradient is gathered whole (sp_full_) for its weight, bias and input gradients, so the
// bias gradients are the same on every tensor rank; each column-parallel layer's input
// gradient (partial sums over the ranks) is reduce-scattered to the rank's rows for the
// LayerNorm backward, whose weight gradients stay partial until sp_sum_norm_grads (under
// ZeRO-2/3 they are summed over the tensor ranks before the layer's gradients are
// reduce-scattered over the data group, each micro-step).
void GptCuda::layers_backward_sp(int64_t l0, int64_t l1) {
  const int64_t C = C_, Cl = Cl_;
  const int64_t R = sp_n();
  cudaStream_t s = stream_;
  for (int64_t l = l1 - 1; l >= l0; --l) {
    Acts& a = acts_[l];
    use_layer(l, -1);
    // (Each layer writes its own gradients only: its projection biases come from the
    // gathered gradients. begin_backward has prepared the last layer's buffer.)
    if (zero3_ && l + 1 < l1) zero3_->prepare_layer_grads(l);
    if (options_.recompute_layers && acts_layer_ != l) layer_forward(l);
    acts_layer_ = -1;
    // MLP projection: d(res[l + 1]) gathered.
    prof_op("tensor_allgather");
    sp_gather(sp_full_, dres_);
    mlp_backward(l, sp_full_, true);
    prof_op("tensor_reduce_scatter");
    const void* dln2 = sp_reduce(dln_);
    prof_op("layernorm_backward");
    cuda::layernorm_backward(t_, dres_, gl(l, P::ln2_w), gl(l, P::ln2_b), nullptr, dln2,
                             a.res_mid, pw(l, in(P::ln2_w)), a.ln2_mean, a.ln2_rstd, R, C, true,
                             ln_scratch_, s);
    // Attention projection: d(res_mid) gathered.
    prof_op("tensor_allgather");
    sp_gather(sp_full_, dres_);
    linear_backward(l, Linear::proj, Cl, C, gl(l, P::proj_w), gl(l, P::proj_b),
                    pw(l, in(P::proj_w)), sp_full_, a.atty, datty_);
    attention_qkv_backward(l);
    prof_op("tensor_reduce_scatter");
    const void* dln1 = sp_reduce(dln_);
    prof_op("layernorm_backward");
    cuda::layernorm_backward(t_, dres_, gl(l, P::ln1_w), gl(l, P::ln1_b), nullptr, dln1, res(l),
                             pw(l, in(P::ln1_w)), a.ln1_mean, a.ln1_rstd, R, C, true,
                             ln_scratch_, s);
    if (zero3_) {  // the LayerNorms' (weight, bias) pairs summed, then the layer reduced
      prof_op("tensor_allreduce_norm_gradients");
      tp_->allreduce_f32(gl(l, P::ln1_w), 2 * C);
      tp_->allreduce_f32(gl(l, P::ln2_w), 2 * C);
      zero3_->layer_backward_done(l);
    }
  }
  prof_op(nullptr);
}

// The LayerNorms' weight and bias gradients of every layer (each over this rank's rows),
// packed, summed over the tensor ranks in fp32, and put back: then they are the whole
// batch's, alike on every tensor rank, like the other replicated parameters' gradients.
void GptCuda::sp_sum_norm_grads() {
  const int64_t C = C_, L = le() - lb();
  if (L <= 0) return;
  const size_t pitch = size_t(shard_.layer_size()) * 4, width = size_t(2 * C) * 4;
  float* pack = sp_ln_pack_;
  float* ln1 = g(shard_.layer_begin(lb()) + in(P::ln1_w));
  float* ln2 = g(shard_.layer_begin(lb()) + in(P::ln2_w));
  prof_op("tensor_allreduce_norm_gradients");
  AISCALE_CUDA_CHECK(cudaMemcpy2DAsync(pack, width, ln1, pitch, width, size_t(L),
                                       cudaMemcpyDeviceToDevice, stream_));
  AISCALE_CUDA_CHECK(cudaMemcpy2DAsync(pack + 2 * C * L, width, ln2, pitch, width, size_t(L),
                                       cudaMemcpyDeviceToDevice, stream_));
  tp_->allreduce_f32(pack, 4 * C * L);
  AISCALE_CUDA_CHECK(cudaMemcpy2DAsync(ln1, pitch, pack, width, width, size_t(L),
                                       cudaMemcpyDeviceToDevice, stream_));
  AISCALE_CUDA_CHECK(cudaMemcpy2DAsync(ln2, pitch, pack + 2 * C * L, width, width, size_t(L),
                                       cudaMemcpyDeviceToDevice, stream_));
  prof_op(nullptr);
}

}  // namespace aiscale::nn::detail
