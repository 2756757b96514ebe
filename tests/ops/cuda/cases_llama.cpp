// test_ops CUDA cases of the llama family: its ops (RMSNorm, the rotary embedding, SwiGLU,
// grouped-query attention through cuDNN and through the own kernels) against host
// references, and the CUDA model of the family against a double-precision host model of
// the contract (gpt_config.h): the loss, every tensor's gradient along a random direction
// against the host model's central difference, bf16 against fp32, and the recomputation
// and accumulation properties.
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "aiscale/nn/models/gpt.h"
#include "aiscale/nn/models/gpt_layout.h"
#include "aiscale/ops/cuda/cudnn_attention.h"
#include "aiscale/ops/ops.h"
#include "cuda_harness.h"

namespace aiscale::ops::testing {
namespace {

namespace cu = aiscale::cuda;

// ---------------------------------------------------------------------------------------
// ops

void check_rmsnorm(CudaContext& x, DType t, int64_t N, int64_t C) {
  const std::string tag = " N=" + std::to_string(N) + " C=" + std::to_string(C);
  const float eps = 1e-5f;
  auto in = dev::randn(N * C, x.rng, 2.0f), w = dev::randn(C, x.rng), dy = dev::randn(N * C, x.rng),
       old = dev::randn(N * C, x.rng);
  dev::round_all(t, in);
  dev::round_all(t, w);
  dev::round_all(t, dy);
  dev::round_all(t, old);
  std::vector<float> y(N * C), rstd(N), dx(N * C), dw(C, 0.5f);
  for (int64_t n = 0; n < N; ++n) {
    double ss = 0;
    for (int64_t c = 0; c < C; ++c) ss += double(in[n * C + c]) * in[n * C + c];
    const double r = 1.0 / std::sqrt(ss / C + eps);
    rstd[n] = float(r);
    double dot = 0;
    for (int64_t c = 0; c < C; ++c) {
      y[n * C + c] = float(in[n * C + c] * r * w[c]);
      dot += double(dy[n * C + c]) * w[c] * in[n * C + c] * r;
    }
    for (int64_t c = 0; c < C; ++c) {
      const double xh = in[n * C + c] * r;
      dx[n * C + c] = old[n * C + c] + float((dy[n * C + c] * w[c] - xh * dot / C) * r);
      dw[c] += float(dy[n * C + c] * xh);
    }
  }
  dev::Buffer d_in(t, N * C), d_w(t, C), d_y(t, N * C), d_rstd(DType::f32, N), d_dy(t, N * C),
      d_dx(t, N * C), d_dw(DType::f32, C);
  d_in.upload(in);
  d_w.upload(w);
  d_dy.upload(dy);
  d_dx.upload(old);  // the residual stream's gradient, accumulated into
  d_dw.upload(std::vector<float>(C, 0.5f));
  cu::rmsnorm_forward(t, d_y.get(), d_rstd.f(), d_in.get(), d_w.get(), N, C, eps, nullptr);
  x.r.record("rmsnorm_forward" + tag, t, dev::rel_err(d_y.download(), y), tol_for(t));
  x.r.record("rmsnorm_forward rstd" + tag, t, dev::rel_err(d_rstd.download(), rstd), 1e-5);
  cu::rmsnorm_backward(t, d_dx.get(), d_dw.f(), d_dy.get(), d_in.get(), d_w.get(), d_rstd.f(), N,
                       C, true, x.scratch, nullptr);
  x.r.record("rmsnorm_backward dx (accumulated)" + tag, t, dev::rel_err(d_dx.download(), dx),
             tol_for(t, 1e-4));
  x.r.record("rmsnorm_backward dweight" + tag, t, dev::rel_err(d_dw.download(), dw), tol_for(t, 1e-4));
}

// Rows of (NH + 2 KVH) heads of size D; the first NH + KVH rotated by pos * theta^(-2i/D).
void check_rotary(CudaContext& x, DType t, int64_t B, int64_t T, int64_t NH, int64_t KVH,
                  int64_t D) {
  const std::string tag = " T=" + std::to_string(T) + " NH=" + std::to_string(NH) + " KVH=" +
                          std::to_string(KVH) + " D=" + std::to_string(D);
  const int64_t N = B * T, W = (NH + 2 * KVH) * D, half = D / 2, rows = T + 3;
  std::vector<float> table(2 * rows * half);
  for (int64_t p = 0; p < rows; ++p)
    for (int64_t i = 0; i < half; ++i) {
      const double a = double(p) * std::pow(10000.0, -double(2 * i) / double(D));
      table[p * half + i] = float(std::cos(a));
      table[(rows + p) * half + i] = float(std::sin(a));
    }
  auto qkv = dev::randn(N * W, x.rng);
  dev::round_all(t, qkv);
  std::vector<float> want = qkv;
  for (int64_t n = 0; n < N; ++n) {
    const int64_t pos = n % T;
    for (int64_t h = 0; h < NH + KVH; ++h)
      for (int64_t i = 0; i < half; ++i) {
        const double a = double(pos) * std::pow(10000.0, -double(2 * i) / double(D));
        const double x1 = qkv[n * W + h * D + i], x2 = qkv[n * W + h * D + i + half];
        want[n * W + h * D + i] = float(x1 * std::cos(a) - x2 * std::sin(a));
        want[n * W + h * D + i + half] = float(x2 * std::cos(a) + x1 * std::sin(a));
      }
  }
  dev::Buffer d_qkv(t, N * W), d_table(DType::f32, table.size());
  d_qkv.upload(qkv);
  d_table.upload(table);
  cu::rotary_apply(t, d_qkv.get(), d_table.f(), rows, N, T, NH + KVH, D, W, false, nullptr);
  const auto got = d_qkv.download();
  x.r.record("rotary forward" + tag, t, dev::rel_err(got, want), tol_for(t, 1e-5));
  // V untouched (bit for bit).
  bool v_same = true;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = (NH + KVH) * D; c < W; ++c) v_same = v_same && got[n * W + c] == qkv[n * W + c];
  x.r.check("rotary leaves V alone" + tag, v_same);
  // The inverse rotation undoes it (the backward).
  cu::rotary_apply(t, d_qkv.get(), d_table.f(), rows, N, T, NH + KVH, D, W, true, nullptr);
  x.r.record("rotary inverse restores" + tag, t, dev::rel_err(d_qkv.download(), qkv),
             tol_for(t, 1e-5) * 2);
}

void check_swiglu(CudaContext& x, DType t, int64_t N, int64_t F) {
  const std::string tag = " N=" + std::to_string(N) + " F=" + std::to_string(F);
  auto gu = dev::randn(N * 2 * F, x.rng, 2.0f), dh = dev::randn(N * F, x.rng);
  dev::round_all(t, gu);
  dev::round_all(t, dh);
  std::vector<float> h(N * F), dgu(N * 2 * F);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t f = 0; f < F; ++f) {
      const double g = gu[n * 2 * F + f], u = gu[n * 2 * F + F + f], s = 1.0 / (1.0 + std::exp(-g));
      h[n * F + f] = float(g * s * u);
      dgu[n * 2 * F + f] = float(dh[n * F + f] * u * s * (1.0 + g * (1.0 - s)));
      dgu[n * 2 * F + F + f] = float(dh[n * F + f] * g * s);
    }
  dev::Buffer d_gu(t, N * 2 * F), d_h(t, N * F), d_dh(t, N * F), d_dgu(t, N * 2 * F);
  d_gu.upload(gu);
  d_dh.upload(dh);
  cu::swiglu_forward(t, d_h.get(), d_gu.get(), N, F, nullptr);
  x.r.record("swiglu_forward" + tag, t, dev::rel_err(d_h.download(), h), tol_for(t, 1e-5));
  cu::swiglu_backward(t, d_dgu.get(), d_dh.get(), d_gu.get(), N, F, nullptr);
  x.r.record("swiglu_backward" + tag, t, dev::rel_err(d_dgu.download(), dgu), tol_for(t, 1e-5));
}

// Grouped-query attention: the reference is the multi-head reference on K and V copied to
// every query head, its dK and dV summed over each group.
void check_gqa_attention(CudaContext& x, DType t, int64_t B, int64_t T, int64_t NH, int64_t KVH,
                         int64_t HS, cu::AttentionImpl impl) {
  const auto& ref = ops::reference_backend();
  const int64_t C = NH * HS, KC = KVH * HS, W = C + 2 * KC, N = B * T, g = NH / KVH;
  const std::string tag = std::string(" ") + cu::attention_impl_name(impl) + " T=" +
                          std::to_string(T) + " NH=" + std::to_string(NH) + " KVH=" +
                          std::to_string(KVH) + " HS=" + std::to_string(HS);
  auto qkv = dev::randn(N * W, x.rng);
  dev::round_all(t, qkv);
  std::vector<float> full(N * 3 * C);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) {
      const int64_t h = c / HS, d = c % HS;
      full[n * 3 * C + c] = qkv[n * W + c];
      full[n * 3 * C + C + c] = qkv[n * W + C + (h / g) * HS + d];
      full[n * 3 * C + 2 * C + c] = qkv[n * W + C + KC + (h / g) * HS + d];
    }
  std::vector<float> out(N * C), att(B * NH * T * T);
  ref.attention_forward(out.data(), att.data(), full.data(), B, T, C, NH);
  auto dout = dev::randn(N * C, x.rng);
  dev::round_all(t, dout);
  std::vector<float> dfull(N * 3 * C), datt(B * NH * T * T), dqkv(N * W, 0.0f);
  ref.attention_backward(dfull.data(), datt.data(), dout.data(), full.data(), att.data(), B, T, C,
                         NH);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) {
      const int64_t h = c / HS, d = c % HS;
      dqkv[n * W + c] = dfull[n * 3 * C + c];
      dqkv[n * W + C + (h / g) * HS + d] += dfull[n * 3 * C + C + c];
      dqkv[n * W + C + KC + (h / g) * HS + d] += dfull[n * 3 * C + 2 * C + c];
    }
  dev::Buffer d_qkv(t, N * W), d_out(t, N * C), d_lse(DType::f32, B * NH * T), d_dout(t, N * C),
      d_dqkv(t, N * W), d_dq(DType::f32, N * C), d_delta(DType::f32, B * NH * T),
      d_full(t, N * 3 * C), d_dfull(t, N * 3 * C), d_ws(DType::f32, 4);
  d_qkv.upload(qkv);
  d_dout.upload(dout);
  std::unique_ptr<cu::CudnnAttention> cudnn;
  if (impl == cu::AttentionImpl::cudnn) {
    cudnn = std::make_unique<cu::CudnnAttention>(t, B, T, NH, HS, KVH);
    d_ws = dev::Buffer(DType::f32, cudnn->workspace_bytes() / 4 + 4);
    cudnn->forward(d_out.get(), d_lse.f(), d_qkv.get(), d_ws.get(), nullptr);
    cudnn->backward(d_dqkv.get(), d_dout.get(), d_qkv.get(), d_out.get(), d_lse.f(), d_dq.f(),
                    d_delta.f(), d_ws.get(), nullptr);
  } else {
    cu::gqa_expand(t, d_full.get(), d_qkv.get(), N, NH, KVH, HS, nullptr);
    cu::attention_forward(t, d_out.get(), d_lse.f(), d_full.get(), B, T, C, NH, impl, nullptr);
    cu::attention_backward(t, d_dfull.get(), d_dout.get(), d_full.get(), d_out.get(), d_lse.f(),
                           B, T, C, NH, d_dq.f(), d_delta.f(), impl, nullptr);
    cu::gqa_reduce(t, d_dqkv.get(), d_dfull.get(), N, NH, KVH, HS, nullptr);
  }
  const double tol = tol_for(t, 1e-4);
  x.r.record("gqa attention forward" + tag, t, dev::rel_err(d_out.download(), out), tol);
  const auto got = d_dqkv.download();
  const char* names[] = {" dQ", " dK", " dV"};
  const int64_t begin[] = {0, C, C + KC}, width[] = {C, KC, KC};
  for (int part = 0; part < 3; ++part) {
    std::vector<float> a, b;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < width[part]; ++c) {
        a.push_back(got[n * W + begin[part] + c]);
        b.push_back(dqkv[n * W + begin[part] + c]);
      }
    x.r.record("gqa attention backward" + std::string(names[part]) + tag, t, dev::rel_err(a, b), tol);
  }
}

// ---------------------------------------------------------------------------------------
// the model against a double-precision host model of the contract

struct HostLlama {
  const nn::GptConfig& c;
  const nn::GptLayout layout;
  int64_t B, T;
  explicit HostLlama(const nn::GptConfig& cfg, int64_t b, int64_t t)
      : c(cfg), layout(cfg), B(b), T(t) {}

  static void rms(const std::vector<double>& x, const float* w, int64_t N, int64_t C, double eps,
                  std::vector<double>& y) {
    y.assign(size_t(N * C), 0.0);
    for (int64_t n = 0; n < N; ++n) {
      double ss = 0;
      for (int64_t k = 0; k < C; ++k) ss += x[n * C + k] * x[n * C + k];
      const double r = 1.0 / std::sqrt(ss / C + eps);
      for (int64_t k = 0; k < C; ++k) y[n * C + k] = x[n * C + k] * r * w[k];
    }
  }
  // y (N, O) = x (N, I) W^T with W (O, I).
  static void linear(const std::vector<double>& x, const float* W, int64_t N, int64_t I, int64_t O,
                     std::vector<double>& y) {
    y.assign(size_t(N * O), 0.0);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t o = 0; o < O; ++o) {
        double s = 0;
        for (int64_t i = 0; i < I; ++i) s += x[n * I + i] * W[o * I + i];
        y[n * O + o] = s;
      }
  }

  // Mean cross-entropy of the model with parameters p on (in, tg).
  double loss(const std::vector<float>& p, const std::vector<int32_t>& in,
              const std::vector<int32_t>& tg) const {
    using P = nn::GptBlockParam;
    const int64_t C = c.n_embd, N = B * T, NH = c.n_head, KVH = c.kv_heads(), D = c.head_size();
    const int64_t KC = KVH * D, W = C + 2 * KC, F = c.ffn(), V = c.vocab_size, g = NH / KVH;
    std::vector<double> x(size_t(N * C)), h, qkv, att(size_t(N * C)), o, gu, a(size_t(N * F)), m;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < C; ++k) x[n * C + k] = p[in[n] * C + k];
    for (int64_t l = 0; l < c.n_layer; ++l) {
      rms(x, &p[layout.at(l, P::ln1_w)], N, C, c.norm_eps, h);
      linear(h, &p[layout.at(l, P::qkv_w)], N, C, W, qkv);
      for (int64_t n = 0; n < N; ++n)  // rotary on the Q and K heads
        for (int64_t hh = 0; hh < NH + KVH; ++hh)
          for (int64_t i = 0; i < D / 2; ++i) {
            const double ang = double(n % T) * std::pow(c.rope_theta, -double(2 * i) / double(D));
            double* v = &qkv[n * W + hh * D];
            const double x1 = v[i], x2 = v[i + D / 2];
            v[i] = x1 * std::cos(ang) - x2 * std::sin(ang);
            v[i + D / 2] = x2 * std::cos(ang) + x1 * std::sin(ang);
          }
      for (int64_t b = 0; b < B; ++b)
        for (int64_t hh = 0; hh < NH; ++hh)
          for (int64_t tq = 0; tq < T; ++tq) {
            const double* q = &qkv[(b * T + tq) * W + hh * D];
            std::vector<double> s(size_t(tq + 1));
            double mx = -1e300;
            for (int64_t tk = 0; tk <= tq; ++tk) {
              const double* k = &qkv[(b * T + tk) * W + C + (hh / g) * D];
              double d = 0;
              for (int64_t i = 0; i < D; ++i) d += q[i] * k[i];
              s[tk] = d / std::sqrt(double(D));
              mx = std::max(mx, s[tk]);
            }
            double z = 0;
            for (auto& v : s) z += (v = std::exp(v - mx));
            for (int64_t i = 0; i < D; ++i) {
              double acc = 0;
              for (int64_t tk = 0; tk <= tq; ++tk)
                acc += s[tk] / z * qkv[(b * T + tk) * W + C + KC + (hh / g) * D + i];
              att[(b * T + tq) * C + hh * D + i] = acc;
            }
          }
      linear(att, &p[layout.at(l, P::proj_w)], N, C, C, o);
      for (size_t i = 0; i < x.size(); ++i) x[i] += o[i];
      rms(x, &p[layout.at(l, P::ln2_w)], N, C, c.norm_eps, h);
      linear(h, &p[layout.at(l, P::fc_w)], N, C, 2 * F, gu);
      for (int64_t n = 0; n < N; ++n)
        for (int64_t f = 0; f < F; ++f) {
          const double gg = gu[n * 2 * F + f];
          a[n * F + f] = gg / (1.0 + std::exp(-gg)) * gu[n * 2 * F + F + f];
        }
      linear(a, &p[layout.at(l, P::fcproj_w)], N, F, C, m);
      for (size_t i = 0; i < x.size(); ++i) x[i] += m[i];
    }
    rms(x, &p[layout.lnf_w()], N, C, c.norm_eps, h);
    std::vector<double> logits;
    linear(h, &p[c.tied() ? 0 : layout.lm_head()], N, C, V, logits);
    double total = 0;
    for (int64_t n = 0; n < N; ++n) {
      double mx = -1e300, z = 0;
      for (int64_t v = 0; v < V; ++v) mx = std::max(mx, logits[n * V + v]);
      for (int64_t v = 0; v < V; ++v) z += std::exp(logits[n * V + v] - mx);
      total += mx + std::log(z) - logits[n * V + tg[n]];
    }
    return total / double(N);
  }
};

struct LlamaCase {
  const char* name;
  nn::GptConfig config;
  int64_t B, T;
};

nn::GptConfig llama_config(int64_t layers, int64_t heads, int64_t kv, int64_t width, int64_t ffn,
                           int64_t vocab, bool tied) {
  nn::GptConfig c = nn::gpt_preset("llama-tiny");
  c.n_layer = layers, c.n_head = heads, c.n_kv_head = kv, c.n_embd = width, c.ffn_hidden = ffn;
  c.vocab_size = vocab, c.tie_embeddings = tied, c.block_size = 128;
  return c;
}

void check_llama_model(Recorder& r, const LlamaCase& mc, DType t) {
  const nn::GptConfig& c = mc.config;
  nn::GptRunOptions o;
  o.batch = mc.B;
  o.seq = mc.T;
  o.seed = 42;
  o.precision = t;
  auto gpu = nn::make_gpt_cuda(c, o);
  o.precision = DType::f32;
  std::unique_ptr<nn::GptModel> f32;
  if (t != DType::f32) f32 = nn::make_gpt_cuda(c, o);
  const std::string tag = std::string("llama ") + mc.name + " (" + gpu->attention_kernels() + ")";
  const int64_t N = mc.B * mc.T, P = c.num_params();
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> tok(0, int32_t(c.vocab_size - 1));
  std::vector<int32_t> in(N), tg(N);
  for (auto& v : in) v = tok(rng);
  for (auto& v : tg) v = tok(rng);
  std::vector<float> params(P);
  gpu->get_params(params.data());
  const HostLlama host(c, mc.B, mc.T);
  const double lh = host.loss(params, in, tg);
  gpu->zero_grad();
  const float lg = gpu->forward(in.data(), tg.data());
  gpu->backward(1.0f);
  std::printf("  %s: loss host %.6f gpu %.6f\n", tag.c_str(), lh, lg);
  r.record(tag + " loss against the host model", t, std::fabs(lg - lh) / lh,
           t == DType::f32 ? 1e-5 : 1e-2);
  std::vector<float> grads(P);
  gpu->get_grads(grads.data());
  if (t == DType::f32) {
    // Every tensor's gradient against the CPU model's (the reference backend, itself
    // finite-difference checked and pinned to the PyTorch Llama fixture) on the same
    // parameters and tokens, as the GPT-2 model case does.
    nn::GptRunOptions co;
    co.batch = mc.B;
    co.seq = mc.T;
    co.seed = 42;
    co.cpu_backend = "reference";
    auto cpu = nn::make_gpt_cpu(c, co);
    cpu->set_params(params.data());
    cpu->zero_grad();
    const float lc = cpu->forward(in.data(), tg.data());
    cpu->backward(1.0f);
    r.record(tag + " loss against the CPU model", t, std::fabs(lg - lc) / lc, 1e-5);
    std::vector<float> gc(P);
    cpu->get_grads(gc.data());
    double worst = 0;
    std::string worst_name;
    for (const auto& info : nn::gpt_param_infos(c)) {
      const size_t n = size_t(info.shape.numel()), off = size_t(info.offset);
      if (n == 0) continue;  // the family's zero-size bias entries
      const std::vector<float> a(grads.begin() + off, grads.begin() + off + n),
          b(gc.begin() + off, gc.begin() + off + n);
      const double e = dev::rel_err(a, b);
      std::printf("  grad %-36s rel_err against the CPU model %.1e\n", info.name.c_str(), e);
      if (e > worst || !std::isfinite(e)) worst = e, worst_name = info.name;
    }
    r.record(tag + " gradients against the CPU model (worst: " + worst_name + ")", t, worst, 1e-3);
    return;
  }
  // bf16 / fp16 against the fp32 model on the same parameters and tokens.
  f32->set_params(params.data());
  f32->zero_grad();
  const float l32 = f32->forward(in.data(), tg.data());
  f32->backward(1.0f);
  std::vector<float> g32(P);
  f32->get_grads(g32.data());
  r.record(tag + " loss against fp32", t, std::fabs(lg - l32) / l32, 1e-2);
  double worst = 0;
  std::string worst_name;
  for (const auto& info : nn::gpt_param_infos(c)) {
    const size_t n = size_t(info.shape.numel()), off = size_t(info.offset);
    const std::vector<float> a(grads.begin() + off, grads.begin() + off + n),
        b(g32.begin() + off, g32.begin() + off + n);
    const double e = dev::rel_err(a, b);
    if (e > worst || !std::isfinite(e)) worst = e, worst_name = info.name;
  }
  r.record(tag + " gradients against fp32 (worst: " + worst_name + ")", t, worst, 6e-2);
}

// Recomputation (norm and SwiGLU outputs; whole layers), the gradient multiplier and
// accumulation: the same numbers as the plain model.
void check_llama_properties(Recorder& r, const LlamaCase& mc, DType t) {
  const nn::GptConfig& c = mc.config;
  nn::GptRunOptions o;
  o.batch = mc.B;
  o.seq = mc.T;
  o.precision = t;
  auto a = nn::make_gpt_cuda(c, o);
  o.recompute = true;
  auto b = nn::make_gpt_cuda(c, o);
  o.recompute = false;
  o.recompute_layers = true;
  auto full = nn::make_gpt_cuda(c, o);
  const int64_t N = mc.B * mc.T, P = c.num_params();
  std::mt19937 rng(11);
  std::uniform_int_distribution<int32_t> tok(0, int32_t(c.vocab_size - 1));
  std::vector<int32_t> in(N), tg(N);
  for (auto& v : in) v = tok(rng);
  for (auto& v : tg) v = tok(rng);
  const std::string tag = std::string("llama ") + mc.name;
  std::vector<float> g1(P), g4(P), gb(P), gf(P);
  a->zero_grad();
  const float la = a->forward(in.data(), tg.data());
  a->backward(1.0f);
  a->get_grads(g1.data());
  a->zero_grad();
  a->forward(in.data(), tg.data());
  a->backward(2.0f);
  a->forward(in.data(), tg.data());
  a->backward(2.0f);  // two micro-steps of multiplier 2: 4 x the gradients
  a->get_grads(g4.data());
  for (auto& v : g1) v *= 4.0f;
  r.record(tag + " multiplier and accumulation", t, dev::rel_err(g4, g1), t == DType::f32 ? 1e-5 : 2e-2);
  for (auto& v : g1) v /= 4.0f;
  b->zero_grad();
  full->zero_grad();
  const float lb = b->forward(in.data(), tg.data());
  const float lf = full->forward(in.data(), tg.data());
  b->backward(1.0f);
  full->backward(1.0f);
  b->get_grads(gb.data());
  full->get_grads(gf.data());
  r.check(tag + " recompute: same loss", la == lb && la == lf);
  r.record(tag + " recompute: same grads", t, dev::rel_err(gb, g1), t == DType::f32 ? 1e-6 : 5e-3);
  r.record(tag + " recompute layers: same grads", t, dev::rel_err(gf, g1), t == DType::f32 ? 1e-6 : 5e-3);
  r.check(tag + " recompute layers: less memory", full->memory_bytes() < a->memory_bytes());
}

}  // namespace

CudaFamily cuda_llama_ops_family() {
  CudaFamily f;
  f.name = "llama_ops";
  f.dtypes = {DType::f32, DType::bf16};
  f.tolerance_note = "RMSNorm, rotary, SwiGLU, grouped-query attention (cuDNN, flash, simple)";
  f.run = [](CudaContext& x, DType t) {
    using cu::AttentionImpl;
    check_rmsnorm(x, t, 64, 256);
    check_rmsnorm(x, t, 33, 2048);
    check_rotary(x, t, 2, 40, 4, 2, 64);
    check_rotary(x, t, 1, 17, 8, 1, 16);
    check_swiglu(x, t, 48, 176);
    check_gqa_attention(x, t, 2, 100, 4, 2, 32, AttentionImpl::simple);
    if (t == DType::f32) return;
    check_gqa_attention(x, t, 2, 100, 4, 1, 64, AttentionImpl::flash);
    if (!cu::cudnn_attention_compiled()) {
      std::printf("  (cuDNN attention: not in this build, not checked)\n");
      return;
    }
    const int64_t shapes[][5] = {{2, 128, 4, 2, 64}, {1, 256, 8, 2, 128}, {2, 100, 4, 4, 64}};
    for (const auto& s : shapes) {
      try {
        check_gqa_attention(x, t, s[0], s[1], s[2], s[3], s[4], AttentionImpl::cudnn);
      } catch (const std::exception& e) {
        x.r.check("gqa attention cudnn KVH=" + std::to_string(s[3]) + ": " + e.what(), false);
      }
    }
  };
  return f;
}

CudaFamily cuda_llama_model_family() {
  CudaFamily f;
  f.name = "llama_model";
  f.dtypes = {DType::f32, DType::bf16};
  f.tolerance_note = "composite: fp32 loss 1e-5 against a double-precision host model and "
                     "the CPU model, gradients 1e-3 against the CPU model; bf16 against fp32";
  f.run = [](CudaContext& x, DType t) {
    const LlamaCase tiny{"llama-tiny (HS16, 2 KV heads, untied) B2 T32",
                         llama_config(2, 4, 2, 64, 176, 256, false), 2, 32};
    const LlamaCase flash{"L2 C128 NH2 KV1 (HS64, tied) V500 B2 T96",
                          llama_config(2, 2, 1, 128, 352, 500, true), 2, 96};
    check_llama_model(x.r, tiny, t);
    check_llama_model(x.r, flash, t);
    check_llama_properties(x.r, flash, t);
  };
  return f;
}

}  // namespace aiscale::ops::testing
