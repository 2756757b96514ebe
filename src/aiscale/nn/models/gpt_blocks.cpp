#include "aiscale/nn/models/gpt_blocks.h"

#include <algorithm>

#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "aiscale/nn/models/gpt_rope.h"

namespace aiscale::nn {

namespace tp = parallel::tensor;

LayerParams layer_views(const GptShardLayout& layout, float* base) {
  LayerParams lp;
  float** fields[kGptBlockParams] = {&lp.ln1_w, &lp.ln1_b, &lp.qkv_w, &lp.qkv_b,
                                     &lp.attproj_w, &lp.attproj_b, &lp.ln2_w, &lp.ln2_b,
                                     &lp.fc_w, &lp.fc_b, &lp.fcproj_w, &lp.fcproj_b};
  for (int j = 0; j < kGptBlockParams; ++j)
    *fields[j] = base + layout.in_layer(static_cast<GptBlockParam>(j));
  if (!layout.config().has_bias())
    lp.ln1_b = lp.qkv_b = lp.attproj_b = lp.ln2_b = lp.fc_b = lp.fcproj_b = nullptr;
  return lp;
}

namespace {
void zero(float* p, int64_t n) { std::memset(p, 0, static_cast<size_t>(n) * 4); }
}  // namespace

GptBlocks::GptBlocks(const ops::Backend& ops, const tp::TensorGroup& group, const GptConfig& c,
                     int64_t B, int64_t T, bool recompute, bool recompute_layers,
                     int64_t first_layer, int64_t end_layer, bool head)
    : ops_(ops), group_(group), llama_(c.llama()), norm_eps_(static_cast<float>(c.norm_eps)),
      recompute_(recompute && !recompute_layers),
      recompute_layers_(recompute_layers), first_(first_layer),
      end_(end_layer < 0 ? c.n_layer : end_layer) {
  d_.B = B;
  d_.T = T;
  d_.C = c.n_embd;
  d_.V = c.vocab_size;
  d_.L = c.n_layer;
  d_.NH = c.n_head / group.size;
  d_.NKV = c.kv_heads() / group.size;
  d_.Cl = c.n_embd / group.size;
  d_.QKVl = c.qkv_rows() / group.size;
  d_.Fl = c.ffn() / group.size;
  d_.FCl = c.fc_rows() / group.size;
  d_.N = B * T;
  d_.R = group.rows(d_.N);
  // The rank's real rows of its vocabulary slice (nn/models/gpt_shard.h; a slice may end in
  // padding rows where the tensor ranks do not divide the vocabulary).
  const int64_t slice = vocab_slice_rows(c.vocab_size, group.size, 1);
  const int64_t first = group.rank * slice;
  d_.vocab = {first, std::clamp<int64_t>(c.vocab_size - first, 0, slice)};
  if (llama_) {
    RopeTable table = rope_table(c, T);
    rope_cos_ = std::move(table.cos);
    rope_sin_ = std::move(table.sin);
  }
  allocate(head);
}

void GptBlocks::norm_forward(float* out, float* mean, float* rstd, const float* x, const float* w,
                             const float* b) {
  if (llama_) ops_.rmsnorm_forward(out, rstd, x, w, d_.R, d_.C, norm_eps_);
  else ops_.layernorm_forward(out, mean, rstd, x, w, b, d_.R, d_.C);
}

void GptBlocks::norm_backward(float* dx, float* dw, float* db, const float* dout, const float* x,
                              const float* w, const float* mean, const float* rstd) {
  if (llama_) ops_.rmsnorm_backward(dx, dw, dout, x, w, rstd, d_.R, d_.C);
  else ops_.layernorm_backward(dx, dw, db, dout, x, w, mean, rstd, d_.R, d_.C);
}

float* GptBlocks::stage_output_grad() {
  d_res_out_ = g_.res_a;
  d_res_in_ = g_.res_b;
  return d_res_out_;
}

void GptBlocks::embedding_forward(const int32_t* tokens, const float* wte, const float* wpe) {
  tp::vocab_embedding_forward(ops_, group_, encoded_, g_.full, tokens, wte, wpe, d_.vocab, d_.B,
                              d_.T, d_.C);
}

void GptBlocks::layer_forward(int64_t l, const LayerParams& w) {
  const int64_t B = d_.B, T = d_.T, C = d_.C, Cl = d_.Cl, N = d_.N, R = d_.R;
  LayerActs& a = acts_[l - first_];
  const float* residual = layer_input(l);
  norm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, residual, w.ln1_w, w.ln1_b);
  tp::column_forward(ops_, group_, a.qkv, a.ln1, a.ln1_full, w.qkv_w, w.qkv_b, N, C, d_.QKVl);
  if (llama_) {  // rotary positions on Q and K in place; attention keeps the rotated ones
    ops_.rope_forward(a.qkv, a.qkv, rope_cos_.data(), rope_sin_.data(), N, T, d_.NH, d_.NKV,
                      Cl / d_.NH);
    ops_.attention_gqa_forward(a.atty, a.att, a.qkv, B, T, Cl, d_.NH, d_.NKV);
  } else {
    ops_.attention_forward(a.atty, a.att, a.qkv, B, T, Cl, d_.NH);
  }
  tp::row_forward(ops_, group_, a.attproj, g_.full, a.atty, w.attproj_w, w.attproj_b, N, Cl, C);
  ops_.residual_forward(a.residual2, residual, a.attproj, R * C);
  norm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.residual2, w.ln2_w, w.ln2_b);
  tp::column_forward(ops_, group_, a.fch, a.ln2, a.ln2_full, w.fc_w, w.fc_b, N, C, d_.FCl);
  if (llama_) ops_.swiglu_forward(a.fch_gelu, a.fch, N, d_.Fl);
  else ops_.gelu_forward(a.fch_gelu, a.fch, N * d_.Fl);
  tp::row_forward(ops_, group_, a.fcproj, g_.full, a.fch_gelu, w.fcproj_w, w.fcproj_b, N, d_.Fl, C);
  ops_.residual_forward(a.residual3, a.residual2, a.fcproj, R * C);
}

float GptBlocks::head_forward(const float* lnf_w, const float* lnf_b, const float* head,
                              const int32_t* targets) {
  const int64_t C = d_.C, N = d_.N;
  norm_forward(lnf_, lnf_mean_, lnf_rstd_, layer_input(end_), lnf_w, lnf_b);
  tp::column_forward(ops_, group_, logits_, lnf_, lnf_full_, head, nullptr, N, C, d_.vocab.size);
  logits_valid_ = true;
  if (!targets) return std::numeric_limits<float>::quiet_NaN();
  tp::vocab_xent_forward(ops_, group_, losses_.data(), xent_stats_, logits_, targets, N, d_.vocab);
  double sum = 0.0;
  for (float x : losses_) sum += x;
  return static_cast<float>(sum / static_cast<double>(N));
}

void GptBlocks::head_backward(float grad_multiplier, const float* lnf_w, const float* head,
                              float* dlnf_w, float* dlnf_b, float* dhead, const int32_t* targets) {
  const int64_t C = d_.C, N = d_.N, R = d_.R;
  std::fill(dlosses_.begin(), dlosses_.end(), grad_multiplier / static_cast<float>(N));
  // In place: the (N, V) logits become their gradient (the largest buffer by far).
  tp::vocab_xent_backward(ops_, group_, logits_, logits_, xent_stats_, targets, dlosses_.data(), N,
                          d_.vocab);
  logits_valid_ = false;
  const float* lnf_in = lnf_full_ && group_.split() ? lnf_full_ : lnf_;
  tp::column_backward(ops_, group_, g_.lnf, g_.full, dhead, nullptr, logits_, lnf_in, head, N, C,
                      d_.vocab.size);
  d_res_out_ = g_.res_a;
  d_res_in_ = g_.res_b;
  zero(d_res_out_, R * C);
  norm_backward(d_res_out_, dlnf_w, dlnf_b, g_.lnf, layer_input(end_), lnf_w, lnf_mean_, lnf_rstd_);
}

void GptBlocks::layer_backward(int64_t l, const LayerParams& w, const LayerParams& gw) {
  const int64_t B = d_.B, T = d_.T, C = d_.C, Cl = d_.Cl, N = d_.N, R = d_.R;
  LayerActs& a = acts_[l - first_];
  const float* residual = layer_input(l);
  const bool gathered = group_.sequence_parallel && group_.split();
  if (recompute_layers_) layer_forward(l, w);  // the layer's activations, into the shared set
  if (recompute_) {  // rebuild what forward did not keep for this layer
    norm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, residual, w.ln1_w, w.ln1_b);
    norm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.residual2, w.ln2_w, w.ln2_b);
    if (llama_) ops_.swiglu_forward(a.fch_gelu, a.fch, N, d_.Fl);
    else ops_.gelu_forward(a.fch_gelu, a.fch, N * d_.Fl);
  }
  // With sequence parallelism the LayerNorm outputs of all ranks are gathered again when
  // they were not kept (recompute shares one buffer among the layers).
  if (gathered && recompute_) tp::enter_forward(group_, a.ln2, a.ln2_full, N, C);
  const float* ln1_in = gathered ? a.ln1_full : a.ln1;
  const float* ln2_in = gathered ? a.ln2_full : a.ln2;
  // residual3 = residual2 + fcproj
  zero(g_.residual2, R * C);
  zero(g_.proj, R * C);
  ops_.residual_backward(g_.residual2, g_.proj, d_res_out_, R * C);
  // fcproj = fch_gelu @ fcproj_w^T + b (row-parallel)
  tp::row_backward(ops_, group_, g_.fch_gelu, gw.fcproj_w, gw.fcproj_b, g_.proj, g_.full,
                   a.fch_gelu, w.fcproj_w, N, d_.Fl, C);
  if (llama_) ops_.swiglu_backward(g_.fch, a.fch, g_.fch_gelu, N, d_.Fl);
  else ops_.gelu_backward(g_.fch, a.fch, g_.fch_gelu, N * d_.Fl);
  tp::column_backward(ops_, group_, g_.ln, g_.full, gw.fc_w, gw.fc_b, g_.fch, ln2_in, w.fc_w, N,
                      C, d_.FCl);
  norm_backward(g_.residual2, gw.ln2_w, gw.ln2_b, g_.ln, a.residual2, w.ln2_w, a.ln2_mean,
                a.ln2_rstd);
  // residual2 = residual + attproj
  zero(d_res_in_, R * C);
  zero(g_.proj, R * C);
  ops_.residual_backward(d_res_in_, g_.proj, g_.residual2, R * C);
  tp::row_backward(ops_, group_, g_.atty, gw.attproj_w, gw.attproj_b, g_.proj, g_.full, a.atty,
                   w.attproj_w, N, Cl, C);
  if (llama_) {
    ops_.attention_gqa_backward(g_.qkv, g_.att, g_.atty, a.qkv, a.att, B, T, Cl, d_.NH, d_.NKV);
    ops_.rope_backward(g_.qkv, g_.qkv, rope_cos_.data(), rope_sin_.data(), N, T, d_.NH, d_.NKV,
                       Cl / d_.NH);
  } else {
    ops_.attention_backward(g_.qkv, g_.att, g_.atty, a.qkv, a.att, B, T, Cl, d_.NH);
  }
  if (gathered && recompute_) tp::enter_forward(group_, a.ln1, a.ln1_full, N, C);
  tp::column_backward(ops_, group_, g_.ln, g_.full, gw.qkv_w, gw.qkv_b, g_.qkv, ln1_in, w.qkv_w,
                      N, C, d_.QKVl);
  norm_backward(d_res_in_, gw.ln1_w, gw.ln1_b, g_.ln, residual, w.ln1_w, a.ln1_mean, a.ln1_rstd);
  std::swap(d_res_out_, d_res_in_);
}

void GptBlocks::embedding_backward(const int32_t* tokens, float* dwte, float* dwpe) {
  tp::vocab_embedding_backward(ops_, group_, dwte, dwpe, d_res_out_, g_.full, tokens, d_.vocab,
                               d_.B, d_.T, d_.C);
}

void GptBlocks::allocate(bool head) {
  const bool rc = recompute_, rl = recompute_layers_;
  const int64_t B = d_.B, T = d_.T, C = d_.C, Cl = d_.Cl, NH = d_.NH, N = d_.N, R = d_.R,
                L = end_ - first_, Vl = head ? d_.vocab.size : 0, QKVl = d_.QKVl, Fl = d_.Fl,
                FCl = d_.FCl;
  const bool sp = group_.sequence_parallel && group_.split();
  TensorLayout lay;
  auto f = [&](const std::string& name, int64_t n) { return lay.add(name, Shape{n}); };
  constexpr size_t kNone = static_cast<size_t>(-1);
  size_t i_enc = f("encoded", R * C);
  struct Idx { size_t ln1, m1, r1, f1, qkv, atty, att, attproj, res2, ln2, m2, r2, f2, fch, gelu, fcproj, res3; };
  std::vector<Idx> idx(L);
  size_t shared_ln1 = rc ? f("recompute.ln1", R * C) : 0;
  size_t shared_ln2 = rc ? f("recompute.ln2", R * C) : 0;
  size_t shared_gelu = rc ? f("recompute.gelu", N * Fl) : 0;
  size_t shared_f1 = rc && sp ? f("recompute.ln1_full", N * C) : kNone;
  size_t shared_f2 = rc && sp ? f("recompute.ln2_full", N * C) : kNone;
  for (int64_t l = 0; l < L; ++l) {
    // Full recomputation: one set of buffers (named after the first layer) serves every
    // layer; each layer keeps its output, the next layer's input.
    if (rl && l > 0) {
      idx[l] = idx[0];
      idx[l].res3 = f(fmt::format("h.{}.residual3", first_ + l), R * C);
      continue;
    }
    std::string p = fmt::format("h.{}.", first_ + l);
    Idx& x = idx[l];
    x.ln1 = rc ? shared_ln1 : f(p + "ln1", R * C);
    x.m1 = f(p + "ln1_mean", R);
    x.r1 = f(p + "ln1_rstd", R);
    x.f1 = !sp ? kNone : rc ? shared_f1 : f(p + "ln1_full", N * C);
    x.qkv = f(p + "qkv", N * QKVl);
    x.atty = f(p + "atty", N * Cl);
    x.att = f(p + "att", B * NH * T * T);
    x.attproj = f(p + "attproj", R * C);
    x.res2 = f(p + "residual2", R * C);
    x.ln2 = rc ? shared_ln2 : f(p + "ln2", R * C);
    x.m2 = f(p + "ln2_mean", R);
    x.r2 = f(p + "ln2_rstd", R);
    x.f2 = !sp ? kNone : rc ? shared_f2 : f(p + "ln2_full", N * C);
    x.fch = f(p + "fch", N * FCl);
    x.gelu = rc ? shared_gelu : f(p + "fch_gelu", N * Fl);
    x.fcproj = f(p + "fcproj", R * C);
    x.res3 = f(p + "residual3", R * C);
  }
  const int64_t H = head ? 1 : 0;  // a stage without the head keeps none of its buffers
  size_t i_lnf = f("lnf", H * R * C), i_lnfm = f("lnf_mean", H * R), i_lnfr = f("lnf_rstd", H * R);
  size_t i_lnff = sp && head ? f("lnf_full", N * C) : kNone;
  size_t i_logits = f("logits", N * Vl);
  size_t i_stats = group_.split() && head ? f("xent_stats", N * (group_.size + 2)) : kNone;
  // Gradients of activations: one set of scratch buffers reused by every layer.
  size_t d_lnf = f("d.lnf", H * R * C), d_ra = f("d.res_a", R * C), d_rb = f("d.res_b", R * C);
  size_t d_r2 = f("d.residual2", R * C), d_proj = f("d.proj", R * C);
  size_t d_fg = f("d.fch_gelu", N * Fl), d_fch = f("d.fch", N * FCl), d_ln = f("d.ln", N * C);
  size_t d_atty = f("d.atty", N * Cl), d_qkv = f("d.qkv", N * QKVl), d_att = f("d.att", B * NH * T * T);
  size_t d_full = sp ? f("d.full", N * C) : kNone;

  arena_ = Arena(lay.total_bytes, Device::cpu);
  arena_.zero();
  auto ptr = [&](size_t i) { return i == kNone ? nullptr : arena_.view(lay.entries[i]).f32(); };
  encoded_ = ptr(i_enc);
  acts_.resize(L);
  for (int64_t l = 0; l < L; ++l) {
    const Idx& x = idx[l];
    acts_[l] = LayerActs{ptr(x.ln1), ptr(x.m1), ptr(x.r1), ptr(x.f1), ptr(x.qkv), ptr(x.atty),
                         ptr(x.att), ptr(x.attproj), ptr(x.res2), ptr(x.ln2), ptr(x.m2),
                         ptr(x.r2), ptr(x.f2), ptr(x.fch), ptr(x.gelu), ptr(x.fcproj), ptr(x.res3)};
  }
  lnf_ = ptr(i_lnf);
  lnf_mean_ = ptr(i_lnfm);
  lnf_rstd_ = ptr(i_lnfr);
  lnf_full_ = ptr(i_lnff);
  logits_ = ptr(i_logits);
  xent_stats_ = ptr(i_stats);
  g_ = {ptr(d_lnf), ptr(d_ra), ptr(d_rb), ptr(d_r2), ptr(d_proj), ptr(d_fg), ptr(d_fch),
        ptr(d_ln), ptr(d_atty), ptr(d_qkv), ptr(d_att), ptr(d_full)};
  d_res_out_ = g_.res_a;
  d_res_in_ = g_.res_b;
  losses_.assign(N, 0.0f);
  dlosses_.assign(N, 0.0f);
}

}  // namespace aiscale::nn
