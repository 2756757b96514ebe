// GPT-2 on the CPU: explicit forward and backward over the ops of one backend
// (ops::cpu_backend() by default, ops::reference_backend() for checks). fp32 throughout.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "aiscale/core/error.h"
#include "aiscale/core/tensor.h"
#include "aiscale/nn/models/gpt.h"
#include "aiscale/nn/models/gpt_layout.h"
#include "aiscale/profile/profiled_backend.h"

namespace aiscale::nn {
namespace {

// Views of one layer's parameters (or gradients) inside a flat buffer.
struct LayerParams {
  float *ln1_w, *ln1_b, *qkv_w, *qkv_b, *attproj_w, *attproj_b;
  float *ln2_w, *ln2_b, *fc_w, *fc_b, *fcproj_w, *fcproj_b;
};
struct ParamViews {
  float *wte, *wpe;
  std::vector<LayerParams> layers;
  float *lnf_w, *lnf_b;
};

ParamViews make_param_views(const GptConfig& c, float* base) {
  const GptLayout layout(c);
  ParamViews v;
  v.wte = base;
  v.wpe = base + layout.wpe();
  for (int64_t l = 0; l < c.n_layer; ++l) {
    LayerParams lp;
    float** fields[kGptBlockParams] = {&lp.ln1_w, &lp.ln1_b, &lp.qkv_w, &lp.qkv_b,
                                       &lp.attproj_w, &lp.attproj_b, &lp.ln2_w, &lp.ln2_b,
                                       &lp.fc_w, &lp.fc_b, &lp.fcproj_w, &lp.fcproj_b};
    for (int j = 0; j < kGptBlockParams; ++j)
      *fields[j] = base + layout.at(l, static_cast<GptBlockParam>(j));
    v.layers.push_back(lp);
  }
  v.lnf_w = base + layout.lnf_w();
  v.lnf_b = base + layout.lnf_b();
  return v;
}

// Per-layer activations saved by forward for backward. With recomputation, ln1, ln2 and
// fch_gelu of every layer point at one shared scratch buffer and are rebuilt in backward.
struct LayerActs {
  float* ln1;       // (B, T, C)
  float* ln1_mean;  // (B, T)
  float* ln1_rstd;  // (B, T)
  float* qkv;       // (B, T, 3C)
  float* atty;      // (B, T, C)
  float* att;       // (B, NH, T, T)
  float* attproj;   // (B, T, C)
  float* residual2; // (B, T, C)
  float* ln2;       // (B, T, C)
  float* ln2_mean;  // (B, T)
  float* ln2_rstd;  // (B, T)
  float* fch;       // (B, T, 4C)
  float* fch_gelu;  // (B, T, 4C)
  float* fcproj;    // (B, T, C)
  float* residual3; // (B, T, C)
};

class GptCpu final : public GptModel {
 public:
  GptCpu(const GptConfig& c, const GptRunOptions& o)
      : config_(c), options_(o), ops_(ops::backend_by_name(o.cpu_backend)) {
    c.validate();
    if (o.seq < 1 || o.seq > c.block_size)
      fail("sequence length {} is outside 1..{} (model.block_size): lower train.seq_len or raise "
           "model.block_size", o.seq, c.block_size);
    if (o.batch < 1) fail("batch size {} is invalid: it must be at least 1", o.batch);
    if (o.precision != DType::f32)
      fail("the CPU model computes in fp32 only (asked for {}): set train.precision = \"fp32\" or "
           "use device = \"cuda\"", dtype_name(o.precision));
    const int64_t n = c.num_params();
    params_ = Arena(n * 4, Device::cpu);
    grads_ = Arena(n * 4, Device::cpu);
    m_ = Arena(n * 4, Device::cpu);
    v_ = Arena(n * 4, Device::cpu);
    grads_.zero();
    m_.zero();
    v_.zero();
    auto init = gpt_init_params(c, o.seed);
    std::memcpy(params_.data(), init.data(), n * 4);
    p_ = make_param_views(c, static_cast<float*>(params_.data()));
    g_ = make_param_views(c, static_cast<float*>(grads_.data()));
    allocate_activations();
  }

  const GptConfig& config() const override { return config_; }
  const GptRunOptions& options() const override { return options_; }
  std::string device_name() const override { return "cpu"; }

  float forward(const int32_t* inputs, const int32_t* targets) override {
    const int64_t B = options_.batch, T = options_.seq, C = config_.n_embd,
                  NH = config_.n_head, V = config_.vocab_size, N = B * T;
    for (int64_t i = 0; i < N; ++i)
      if (inputs[i] < 0 || inputs[i] >= V)
        fail("token id {} at position {} is outside the vocabulary 0..{}: the data does not match "
             "model.vocab_size", inputs[i], i, V - 1);
    std::copy(inputs, inputs + N, inputs_.begin());
    has_targets_ = targets != nullptr;
    if (has_targets_) {
      for (int64_t i = 0; i < N; ++i)
        if (targets[i] < 0 || targets[i] >= V)
          fail("target id {} at position {} is outside the vocabulary 0..{}", targets[i], i, V - 1);
      std::copy(targets, targets + N, targets_.begin());
    }

    ops_.embedding_forward(encoded_, inputs_.data(), p_.wte, p_.wpe, B, T, C);
    float* residual = encoded_;
    for (int64_t l = 0; l < config_.n_layer; ++l) {
      const LayerParams& w = p_.layers[l];
      LayerActs& a = acts_[l];
      ops_.layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, residual, w.ln1_w, w.ln1_b, N, C);
      ops_.matmul_forward(a.qkv, a.ln1, w.qkv_w, w.qkv_b, N, C, 3 * C);
      ops_.attention_forward(a.atty, a.att, a.qkv, B, T, C, NH);
      ops_.matmul_forward(a.attproj, a.atty, w.attproj_w, w.attproj_b, N, C, C);
      ops_.residual_forward(a.residual2, residual, a.attproj, N * C);
      ops_.layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.residual2, w.ln2_w, w.ln2_b, N, C);
      ops_.matmul_forward(a.fch, a.ln2, w.fc_w, w.fc_b, N, C, 4 * C);
      ops_.gelu_forward(a.fch_gelu, a.fch, N * 4 * C);
      ops_.matmul_forward(a.fcproj, a.fch_gelu, w.fcproj_w, w.fcproj_b, N, 4 * C, C);
      ops_.residual_forward(a.residual3, a.residual2, a.fcproj, N * C);
      residual = a.residual3;
    }
    ops_.layernorm_forward(lnf_, lnf_mean_, lnf_rstd_, residual, p_.lnf_w, p_.lnf_b, N, C);
    ops_.matmul_forward(logits_, lnf_, p_.wte, nullptr, N, C, V);
    logits_valid_ = true;
    if (!has_targets_) return std::numeric_limits<float>::quiet_NaN();
    ops_.softmax_xent_forward(losses_.data(), logits_, targets_.data(), N, V);
    double sum = 0.0;
    for (float x : losses_) sum += x;
    return static_cast<float>(sum / static_cast<double>(N));
  }

  void backward(float grad_multiplier) override {
    if (!has_targets_ || !logits_valid_)
      fail("backward() needs a forward() with targets before it");
    const int64_t B = options_.batch, T = options_.seq, C = config_.n_embd,
                  NH = config_.n_head, V = config_.vocab_size, N = B * T;
    const float dloss = grad_multiplier / static_cast<float>(N);
    std::fill(dlosses_.begin(), dlosses_.end(), dloss);
    // In place: the (N, V) logits become their gradient (the largest buffer by far).
    ops_.softmax_xent_backward(logits_, logits_, targets_.data(), dlosses_.data(), N, V);
    logits_valid_ = false;
    float* dlogits = logits_;
    ops_.matmul_backward(d_.lnf, g_.wte, nullptr, dlogits, lnf_, p_.wte, N, C, V);

    // d_res_out: gradient w.r.t. the output of the layer being processed.
    float* d_res_out = d_.res_a;
    float* d_res_in = d_.res_b;
    const float* last = config_.n_layer > 0 ? acts_.back().residual3 : encoded_;
    zero(d_res_out, N * C);
    ops_.layernorm_backward(d_res_out, g_.lnf_w, g_.lnf_b, d_.lnf, last, p_.lnf_w, lnf_mean_,
                            lnf_rstd_, N, C);

    for (int64_t l = config_.n_layer - 1; l >= 0; --l) {
      const LayerParams& w = p_.layers[l];
      const LayerParams& gw = g_.layers[l];
      LayerActs& a = acts_[l];
      const float* residual = l == 0 ? encoded_ : acts_[l - 1].residual3;
      if (options_.recompute) {  // rebuild what forward did not keep for this layer
        ops_.layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, residual, w.ln1_w, w.ln1_b, N, C);
        ops_.layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.residual2, w.ln2_w, w.ln2_b, N, C);
        ops_.gelu_forward(a.fch_gelu, a.fch, N * 4 * C);
      }
      // residual3 = residual2 + fcproj
      zero(d_.residual2, N * C);
      zero(d_.proj, N * C);
      ops_.residual_backward(d_.residual2, d_.proj, d_res_out, N * C);
      // fcproj = fch_gelu @ fcproj_w^T + b
      ops_.matmul_backward(d_.fch_gelu, gw.fcproj_w, gw.fcproj_b, d_.proj, a.fch_gelu, w.fcproj_w,
                           N, 4 * C, C);
      ops_.gelu_backward(d_.fch, a.fch, d_.fch_gelu, N * 4 * C);
      ops_.matmul_backward(d_.ln, gw.fc_w, gw.fc_b, d_.fch, a.ln2, w.fc_w, N, C, 4 * C);
      ops_.layernorm_backward(d_.residual2, gw.ln2_w, gw.ln2_b, d_.ln, a.residual2, w.ln2_w,
                              a.ln2_mean, a.ln2_rstd, N, C);
      // residual2 = residual + attproj
      zero(d_res_in, N * C);
      zero(d_.proj, N * C);
      ops_.residual_backward(d_res_in, d_.proj, d_.residual2, N * C);
      ops_.matmul_backward(d_.atty, gw.attproj_w, gw.attproj_b, d_.proj, a.atty, w.attproj_w, N,
                           C, C);
      ops_.attention_backward(d_.qkv, d_.att, d_.atty, a.qkv, a.att, B, T, C, NH);
      ops_.matmul_backward(d_.ln, gw.qkv_w, gw.qkv_b, d_.qkv, a.ln1, w.qkv_w, N, C, 3 * C);
      ops_.layernorm_backward(d_res_in, gw.ln1_w, gw.ln1_b, d_.ln, residual, w.ln1_w, a.ln1_mean,
                              a.ln1_rstd, N, C);
      std::swap(d_res_out, d_res_in);
    }
    ops_.embedding_backward(g_.wte, g_.wpe, d_res_out, inputs_.data(), B, T, C);
  }

  void zero_grad() override { grads_.zero(); }
  void set_profiler(profile::OpProfiler* p) override {
    ops_ = profile::profiled_host_backend(ops::backend_by_name(options_.cpu_backend), p);
  }

  double grad_sum_squares() override {
    return ops::sum_squares(static_cast<const float*>(grads_.data()), num_params());
  }

  void update(const ops::AdamWParams& hp) override {
    float* p = static_cast<float*>(params_.data());
    float* g = static_cast<float*>(grads_.data());
    float* m = static_cast<float*>(m_.data());
    float* v = static_cast<float*>(v_.data());
    for (const auto& info : GptLayout(config_).tensors()) {
      ops::AdamWParams h = hp;
      if (!GptLayout::decays(info, options_.decay_embeddings)) h.weight_decay = 0.0f;
      const int64_t o = info.offset;
      ops_.adamw_update(p + o, g + o, m + o, v + o, info.shape.numel(), h);
    }
  }

  void logits_at(int64_t b, int64_t t, float* out) override {
    if (!logits_valid_) fail("logits are not available: run forward() first (backward consumes them)");
    const int64_t V = config_.vocab_size;
    const float* row = logits_ + (b * options_.seq + t) * V;
    std::copy(row, row + V, out);
  }

  void get_params(float* out) const override { copy_out(params_, out); }
  void set_params(const float* in) override { copy_in(params_, in); }
  void get_grads(float* out) const override { copy_out(grads_, out); }
  void set_grads(const float* in) override { copy_in(grads_, in); }
  void get_optimizer_state(float* m, float* v) const override {
    copy_out(m_, m);
    copy_out(v_, v);
  }
  void set_optimizer_state(const float* m, const float* v) override {
    copy_in(m_, m);
    copy_in(v_, v);
  }
  float* grad_buffer() override { return static_cast<float*>(grads_.data()); }
  float* param_buffer() override { return static_cast<float*>(params_.data()); }
  size_t memory_bytes() const override {
    return params_.bytes() + grads_.bytes() + m_.bytes() + v_.bytes() + acts_arena_.bytes();
  }

 private:
  static void zero(float* p, int64_t n) { std::memset(p, 0, static_cast<size_t>(n) * 4); }
  void copy_out(const Arena& a, float* out) const {
    std::memcpy(out, a.data(), static_cast<size_t>(num_params()) * 4);
  }
  void copy_in(Arena& a, const float* in) {
    std::memcpy(a.data(), in, static_cast<size_t>(num_params()) * 4);
  }

  void allocate_activations() {
    const int64_t B = options_.batch, T = options_.seq, C = config_.n_embd, NH = config_.n_head,
                  V = config_.vocab_size, N = B * T, L = config_.n_layer;
    const bool rc = options_.recompute;
    TensorLayout lay;
    auto f = [&](const std::string& name, int64_t n) { return lay.add(name, Shape{n}); };
    size_t i_enc = f("encoded", N * C);
    struct Idx { size_t ln1, m1, r1, qkv, atty, att, attproj, res2, ln2, m2, r2, fch, gelu, fcproj, res3; };
    std::vector<Idx> idx(L);
    size_t shared_ln1 = rc ? f("recompute.ln1", N * C) : 0;
    size_t shared_ln2 = rc ? f("recompute.ln2", N * C) : 0;
    size_t shared_gelu = rc ? f("recompute.gelu", N * 4 * C) : 0;
    for (int64_t l = 0; l < L; ++l) {
      std::string p = fmt::format("h.{}.", l);
      Idx& x = idx[l];
      x.ln1 = rc ? shared_ln1 : f(p + "ln1", N * C);
      x.m1 = f(p + "ln1_mean", N);
      x.r1 = f(p + "ln1_rstd", N);
      x.qkv = f(p + "qkv", N * 3 * C);
      x.atty = f(p + "atty", N * C);
      x.att = f(p + "att", B * NH * T * T);
      x.attproj = f(p + "attproj", N * C);
      x.res2 = f(p + "residual2", N * C);
      x.ln2 = rc ? shared_ln2 : f(p + "ln2", N * C);
      x.m2 = f(p + "ln2_mean", N);
      x.r2 = f(p + "ln2_rstd", N);
      x.fch = f(p + "fch", N * 4 * C);
      x.gelu = rc ? shared_gelu : f(p + "fch_gelu", N * 4 * C);
      x.fcproj = f(p + "fcproj", N * C);
      x.res3 = f(p + "residual3", N * C);
    }
    size_t i_lnf = f("lnf", N * C), i_lnfm = f("lnf_mean", N), i_lnfr = f("lnf_rstd", N);
    size_t i_logits = f("logits", N * V);
    // Gradients of activations: one set of scratch buffers reused by every layer.
    size_t d_lnf = f("d.lnf", N * C), d_ra = f("d.res_a", N * C), d_rb = f("d.res_b", N * C);
    size_t d_r2 = f("d.residual2", N * C), d_proj = f("d.proj", N * C);
    size_t d_fg = f("d.fch_gelu", N * 4 * C), d_fch = f("d.fch", N * 4 * C), d_ln = f("d.ln", N * C);
    size_t d_atty = f("d.atty", N * C), d_qkv = f("d.qkv", N * 3 * C), d_att = f("d.att", B * NH * T * T);

    acts_arena_ = Arena(lay.total_bytes, Device::cpu);
    acts_arena_.zero();
    auto ptr = [&](size_t i) { return acts_arena_.view(lay.entries[i]).f32(); };
    encoded_ = ptr(i_enc);
    acts_.resize(L);
    for (int64_t l = 0; l < L; ++l) {
      const Idx& x = idx[l];
      acts_[l] = LayerActs{ptr(x.ln1), ptr(x.m1), ptr(x.r1), ptr(x.qkv), ptr(x.atty), ptr(x.att),
                           ptr(x.attproj), ptr(x.res2), ptr(x.ln2), ptr(x.m2), ptr(x.r2),
                           ptr(x.fch), ptr(x.gelu), ptr(x.fcproj), ptr(x.res3)};
    }
    lnf_ = ptr(i_lnf);
    lnf_mean_ = ptr(i_lnfm);
    lnf_rstd_ = ptr(i_lnfr);
    logits_ = ptr(i_logits);
    d_ = {ptr(d_lnf), ptr(d_ra), ptr(d_rb), ptr(d_r2), ptr(d_proj), ptr(d_fg),
          ptr(d_fch), ptr(d_ln), ptr(d_atty), ptr(d_qkv), ptr(d_att)};
    inputs_.assign(N, 0);
    targets_.assign(N, 0);
    losses_.assign(N, 0.0f);
    dlosses_.assign(N, 0.0f);
  }

  GptConfig config_;
  GptRunOptions options_;
  ops::Backend ops_;  // a copy of the backend's table (a timed one while profiled)
  Arena params_, grads_, m_, v_, acts_arena_;
  ParamViews p_, g_;
  float* encoded_ = nullptr;  // (B, T, C)
  std::vector<LayerActs> acts_;
  float *lnf_ = nullptr, *lnf_mean_ = nullptr, *lnf_rstd_ = nullptr;
  float* logits_ = nullptr;  // (B, T, V); holds dlogits after backward
  struct {
    float *lnf, *res_a, *res_b, *residual2, *proj, *fch_gelu, *fch, *ln, *atty, *qkv, *att;
  } d_{};
  std::vector<int32_t> inputs_, targets_;
  std::vector<float> losses_, dlosses_;
  bool has_targets_ = false;
  bool logits_valid_ = false;
};

}  // namespace

std::unique_ptr<GptModel> make_gpt_cpu(const GptConfig& c, const GptRunOptions& o) {
  return std::make_unique<GptCpu>(c, o);
}

}  // namespace aiscale::nn
