// The llama family in the CUDA GPT model (the class: gpt_cuda_model.cuh; the model and
// its precision, memory and data parallelism: gpt_cuda.cu). The same flat layout, buffers
// and GEMMs as GPT-2, with the family's own pieces (the contract: gpt_config.h):
// - RMSNorm for the LayerNorms (LayerNorm's kernels without mean and bias; the residual's
//   gradient accumulates in the norm's backward as GPT-2's does);
// - no biases: every linear layer runs without its epilogue's bias, and the projections that
//   write into the residual stream add it in their epilogue as GPT-2's do;
// - the rotary embedding applied in place to Q and K in the fused QKV activations right after
//   their GEMM (attention and its backward read the rotated values, which the activations
//   keep), and its inverse to their gradients before the QKV GEMM's backward;
// - grouped-query attention: cuDNN's fused engines take the KV heads as they are; the own
//   kernels take K and V expanded to every query head in a scratch buffer, and the expanded
//   dK, dV are summed back over each group;
// - SwiGLU over the fused gate | up activations (N, 2F) into (N, F); backward writes the
//   gradient of SwiGLU's output over its (no longer needed) output buffer, then (N, 2F)
//   into the MLP's gradient buffer;
// - the LM head: the token embedding when tied, else its own weight after the final norm
//   (the embedding's gradient then comes from the lookup only);
// - tensor parallelism as GPT-2's (gpt_cuda_tp.cuh): each rank holds its slices of Q, K
//   and V (whole heads of each), of gate and of up, and of the vocabulary of the embedding
//   and of an untied head; o_proj and down_proj are row-parallel (partial sums, summed over
//   the tensor ranks), qkv_proj and gate_up_proj's input gradients likewise. Not yet with
//   sequence parallelism;
// - pipeline stages as GPT-2's (gpt_cuda_pp.cuh): the stage runs these layers and, on the
//   last stage, this head; an untied head is summed over the stages with the final norm.
// GPT-2's path branches here once per layer and once per head pass, outside its loops.
#include <cuda_runtime.h>

#include <string>

#include "aiscale/nn/models/gpt_cuda_model.cuh"
#include "aiscale/ops/cuda/common.cuh"

namespace aiscale::nn::detail {

void GptCuda::llama_check_layout(bool tensor, bool pipeline) const {
  if (tensor && options_.sequence_parallel)
    throw Error("model.family = \"llama\" on GPUs runs tensor parallelism without sequence "
                "parallelism so far: set parallel.sequence_parallel = false");
  const int64_t tp = shard_.tp();
  if (tensor && config_.kv_heads() % tp != 0)
    throw Error("parallel.tensor_parallel = " + std::to_string(tp) + " does not divide the " +
                std::to_string(config_.kv_heads()) + " key/value heads (model.n_kv_head): each "
                "tensor rank holds whole KV heads; choose a tensor_parallel that divides them");
  if (tensor && config_.ffn() % tp != 0)
    throw Error("parallel.tensor_parallel = " + std::to_string(tp) + " does not divide "
                "model.ffn_hidden = " + std::to_string(config_.ffn()) +
                ": choose a tensor_parallel that divides it");
  // ZeRO-2/3 gather an untied head with the final norm, without padded vocabulary rows:
  // the head's GEMMs read Vp rows, so the vocabulary must fill them.
  if ((options_.zero_stage >= 2 || options_.offload_optimizer) && !config_.tied() && Vp_ != V_)
    throw Error("model.family = \"llama\" with an untied LM head under ZeRO-2/3 on GPUs needs "
                "model.vocab_size a multiple of 128 (it is " + std::to_string(config_.vocab_size) +
                "): pad the vocabulary, tie the head (model.tie_embeddings = true) or set "
                "parallel.zero_stage = 0 or 1");
  // The flat buffers are read through the shard layout: with one tensor rank and one stage
  // its offsets must be the GPT layout's.
  if (tensor || pipeline) return;
  const GptLayout full(config_);
  bool same = shard_.size() == full.size() && shard_.layers_begin() == full.layers_begin() &&
              shard_.layer_size() == full.layer_size() && shard_.lnf_w() == full.lnf_w();
  for (int j = 0; j < kGptBlockParams; ++j)
    same = same && shard_.in_layer(static_cast<P>(j)) == full.in_layer(static_cast<P>(j));
  if (!same)
    throw Error("model.family = \"llama\": this build's shard layout (gpt_shard.h) does not "
                "place the llama family's tensors as the GPT layout does; the CUDA model "
                "cannot address its parameters");
}

void GptCuda::llama_attention_forward(Acts& a) {
  const int64_t B = B_, T = T_, N = N_, Cl = Cl_, NHl = NHl_;
  cudaStream_t s = stream_;
  prof_op("attention_forward", 2.0 * B * T * T * Cl);
  if (cudnn_attention_) {
    cudnn_attention_->forward(a.atty, a.lse, a.qkv, cudnn_workspace_, s);
  } else if (KVl_ != NHl) {
    cuda::gqa_expand(t_, gqa_full_, a.qkv, N, NHl, KVl_, HS_, s);
    cuda::attention_forward(t_, a.atty, a.lse, gqa_full_, B, T, Cl, NHl, attention_impl_, s);
  } else {
    cuda::attention_forward(t_, a.atty, a.lse, a.qkv, B, T, Cl, NHl, attention_impl_, s);
  }
}

void GptCuda::llama_attention_backward(Acts& a) {
  const int64_t B = B_, T = T_, N = N_, Cl = Cl_, NHl = NHl_;
  cudaStream_t s = stream_;
  prof_op("attention_backward", 4.0 * B * T * T * Cl);
  if (cudnn_attention_) {
    cudnn_attention_->backward(dqkv_, datty_, a.qkv, a.atty, a.lse, dq_accum_, delta_,
                               cudnn_workspace_, s);
  } else if (KVl_ != NHl) {
    cuda::gqa_expand(t_, gqa_full_, a.qkv, N, NHl, KVl_, HS_, s);
    cuda::attention_backward(t_, gqa_dfull_, datty_, gqa_full_, a.atty, a.lse, B, T, Cl, NHl,
                             dq_accum_, delta_, attention_impl_, s);
    cuda::gqa_reduce(t_, dqkv_, gqa_dfull_, N, NHl, KVl_, HS_, s);
  } else {
    cuda::attention_backward(t_, dqkv_, datty_, a.qkv, a.atty, a.lse, B, T, Cl, NHl, dq_accum_,
                             delta_, attention_impl_, s);
  }
}

void GptCuda::llama_layer_forward(int64_t l) {
  const int64_t N = N_, C = C_, T = T_, Cl = Cl_, Fl = Fl_, W = QKVl_;
  cudaStream_t s = stream_;
  Acts& a = acts_[l];
  prof_op("rmsnorm_forward");
  cuda::rmsnorm_forward(t_, a.ln1, a.ln1_rstd, res(l), pw(l, in(P::ln1_w)), N, C, norm_eps_, s);
  prof_op("matmul_forward", 2.0 * N * C * W);
  linear_forward(l, Linear::qkv, a.qkv, nullptr, a.ln1, pw(l, in(P::qkv_w)), nullptr, nullptr, C,
                 W);
  prof_op("rotary_forward");
  cuda::rotary_apply(t_, a.qkv, rope_table_, T_, N, T, NHl_ + KVl_, HS_, W, false, s);
  llama_attention_forward(a);
  prof_op("matmul_forward", 2.0 * N * C * Cl);
  // Row-parallel under tensor parallelism: partial sums (rank 0 adds the residual), summed.
  linear_forward(l, Linear::proj, a.res_mid, nullptr, a.atty, pw(l, in(P::proj_w)), nullptr,
                 row_add(res(l)), Cl, C);
  if (tp_) prof_op("tensor_allreduce");
  tp_sum(a.res_mid);
  prof_op("rmsnorm_forward");
  cuda::rmsnorm_forward(t_, a.ln2, a.ln2_rstd, a.res_mid, pw(l, in(P::ln2_w)), N, C, norm_eps_,
                        s);
  prof_op("matmul_forward", 4.0 * N * C * Fl);
  linear_forward(l, Linear::fc, a.fc_pre, nullptr, a.ln2, pw(l, in(P::fc_w)), nullptr, nullptr, C,
                 2 * Fl);
  prof_op("swiglu_forward");
  cuda::swiglu_forward(t_, a.fc_gelu, a.fc_pre, N, Fl, s);
  prof_op("matmul_forward", 2.0 * N * C * Fl);
  linear_forward(l, Linear::fcproj, res(l + 1), nullptr, a.fc_gelu, pw(l, in(P::fcproj_w)),
                 nullptr, row_add(a.res_mid), Fl, C);
  if (tp_) prof_op("tensor_allreduce");
  tp_sum(res(l + 1));
  acts_layer_ = l;
}

// Layers [l1 - 1 .. l0] backward: dres_ = d res(l1) in, d res(l0) out (as layers_backward).
void GptCuda::llama_layers_backward(int64_t l0, int64_t l1) {
  const int64_t N = N_, C = C_, T = T_, Cl = Cl_, Fl = Fl_, W = QKVl_;
  cudaStream_t s = stream_;
  for (int64_t l = l1 - 1; l >= l0; --l) {
    // (ZeRO-3: begin_backward prepared the top layer's gradient buffer.)
    Acts& a = begin_layer_backward(l);
    if (recompute_norms()) {
      prof_op("rmsnorm_forward");
      cuda::rmsnorm_forward(t_, a.ln1, a.ln1_rstd, res(l), pw(l, in(P::ln1_w)), N, C, norm_eps_,
                            s);
      prof_op("rmsnorm_forward");
      cuda::rmsnorm_forward(t_, a.ln2, a.ln2_rstd, a.res_mid, pw(l, in(P::ln2_w)), N, C,
                            norm_eps_, s);
      prof_op("swiglu_forward");
      cuda::swiglu_forward(t_, a.fc_gelu, a.fc_pre, N, Fl, s);
    }
    // down_proj: dres = d res(l + 1).
    // (d of SwiGLU's output over that output: read by the weight gradient only.)
    linear_backward(l, Linear::fcproj, Fl, C, gl(l, P::fcproj_w), nullptr, pw(l, in(P::fcproj_w)),
                    dres_, a.fc_gelu, a.fc_gelu);
    prof_op("swiglu_backward");
    cuda::swiglu_backward(t_, dfc_, a.fc_gelu, a.fc_pre, N, Fl, s);
    // gate_up_proj.
    linear_backward(l, Linear::fc, C, 2 * Fl, gl(l, P::fc_w), nullptr, pw(l, in(P::fc_w)), dfc_,
                    a.ln2, dln_);
    if (tp_) prof_op("tensor_allreduce");  // column-parallel: the input gradient's partial sums
    tp_sum(dln_);
    prof_op("rmsnorm_backward");
    cuda::rmsnorm_backward(t_, dres_, gl(l, P::ln2_w), dln_, a.res_mid, pw(l, in(P::ln2_w)),
                           a.ln2_rstd, N, C, true, ln_scratch_, s);
    if (l == 0) ready(kGptLayer0Mlp);
    // o_proj: dres = d res_mid.
    linear_backward(l, Linear::proj, Cl, C, gl(l, P::proj_w), nullptr, pw(l, in(P::proj_w)), dres_,
                    a.atty, datty_);
    llama_attention_backward(a);
    prof_op("rotary_backward");
    cuda::rotary_apply(t_, dqkv_, rope_table_, T_, N, T, NHl_ + KVl_, HS_, W, true, s);
    // qkv_proj.
    linear_backward(l, Linear::qkv, C, W, gl(l, P::qkv_w), nullptr, pw(l, in(P::qkv_w)), dqkv_,
                    a.ln1, dln_,
                    l == 0 ? std::optional<int>(kGptLayer0Qkv) : std::nullopt);
    if (tp_) prof_op("tensor_allreduce");
    tp_sum(dln_);
    prof_op("rmsnorm_backward");
    cuda::rmsnorm_backward(t_, dres_, gl(l, P::ln1_w), dln_, res(l), pw(l, in(P::ln1_w)),
                           a.ln1_rstd, N, C, true, ln_scratch_, s);
    ready(static_cast<int>(l));
    if (zero3_) zero3_->layer_backward_done(l);
  }
  prof_op(nullptr);
}

// The final RMSNorm and the LM head: res(le()) in, logits out.
void GptCuda::llama_head_forward() {
  const int64_t N = N_, C = C_;
  cudaStream_t s = stream_;
  prof_op("rmsnorm_forward");
  cuda::rmsnorm_forward(t_, lnf_, lnf_rstd_, head_in(), lnf_w(), N, C, norm_eps_, s);
  prof_op("matmul_forward", 2.0 * N * C * Vp_);
  cuda::linear_forward(*gemm_, t_, logits_, nullptr, lnf_, head_w(), nullptr, nullptr, N, C, Vp_,
                       linear_, s);
}

// dlogits (in logits_, scaled by alpha) in, dres_ = d res(le()) out; the head's weight
// gradient (the token embedding's when tied) and the final norm's added.
void GptCuda::llama_head_backward(float alpha) {
  const int64_t N = N_, C = C_;
  cudaStream_t s = stream_;
  prof_op("matmul_backward", 2.0 * N * C * Vp_);
  cuda::linear_backward_input(*gemm_, t_, dln_, logits_, head_w(), N, C, Vp_, Vp_, alpha, nullptr,
                              nullptr, bias_scratch_, linear_, s);
  if (shard_.vocab_parallel()) {  // each rank's vocabulary slice's part of d norm
    prof_op("tensor_allreduce");
    tp_sum(dln_);
  }
  prof_op("matmul_backward", 2.0 * N * C * V_);
  cuda::linear_backward_weight(*gemm_, t_, g_head(), nullptr, logits_, lnf_, N, C, V_, Vp_, alpha,
                               bias_scratch_, linear_, s);
  ready(kGptAfterLmHead);
  prof_op("rmsnorm_backward");
  cuda::rmsnorm_backward(t_, dres_, g_lnf(0), dln_, head_in(), lnf_w(), lnf_rstd_, N, C, false,
                         ln_scratch_, s);
}

}  // namespace aiscale::nn::detail
