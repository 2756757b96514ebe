// GPU checks, in the spirit of ggml's test-backend-ops:
//   aiscale_gpu_check            every CUDA op vs the CPU reference (ops::reference_backend)
//                                in fp32 and bf16 (fp16 for some), then the CUDA GPT model
//                                vs the CPU GPT model (loss, every gradient, AdamW steps)
//   aiscale_gpu_check --perf     time each op at GPT-2 124M sizes (B=16, T=1024)
// Exit code: 0 all passed, 1 a check failed, 77 no GPU (CTest: skipped).
//
// Tolerances (relative error ||gpu - ref|| / ||ref||, inputs rounded to the device dtype
// first so that only the kernel's own arithmetic is measured):
//   fp32: 2e-5 for single ops (fp32 GEMMs without TF32, fast exp), 1e-4 for attention;
//   bf16: 2e-2 (outputs rounded to bf16: ~4e-3 each, attention rounds P and dS too);
//   fp16: 5e-3.
//   Model: fp32 loss 1e-5, gradients 1e-3; bf16 loss 1e-2, gradients 6e-2 (whole chain in
//   bf16 activations against an fp32 model).
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "aiscale/nn/models/gpt.h"
#include "aiscale/ops/cuda/cuda_ops.cuh"
#include "aiscale/ops/cuda/cudnn_attention.h"
#include "aiscale/ops/ops.h"
#include "gpu_check_util.h"

using namespace aiscale;
using namespace aiscale::gpu_check;
namespace cu = aiscale::cuda;

namespace {

double tol_for(DType t, double f32_tol = 2e-5) {
  return t == DType::f32 ? f32_tol : t == DType::bf16 ? 2e-2 : 5e-3;
}

struct Ctx {
  cu::Gemm* gemm = nullptr;
  float* scratch = nullptr;  // large fp32 scratch for bias / layernorm partials
  std::mt19937 rng{1234};
  Results r;
};

// --------------------------------------------------------------------------------------
// matmul family

void check_linear(Ctx& x, DType t, int64_t N, int64_t C, int64_t OC, bool fused) {
  const auto& ref = ops::reference_backend();
  const std::string tag = std::string(fused ? "" : " unfused") + " N=" + std::to_string(N) +
                          " C=" + std::to_string(C) + " OC=" + std::to_string(OC);
  cu::LinearOptions lo;
  lo.fused_gelu = lo.fused_dgelu = lo.fused_bgrad = fused;
  auto inp = randn(N * C, x.rng), w = randn(OC * C, x.rng, 0.05f), b = randn(OC, x.rng, 0.1f);
  auto res = randn(N * OC, x.rng);
  round_all(t, inp);
  round_all(t, w);
  round_all(t, b);
  round_all(t, res);
  DevBuf d_inp(t, N * C), d_w(t, OC * C), d_b(t, OC), d_res(t, N * OC), d_out(t, N * OC),
      d_pre(t, N * OC);
  d_inp.upload(inp);
  d_w.upload(w);
  d_b.upload(b);
  d_res.upload(res);
  std::vector<float> ref_out(N * OC);
  ref.matmul_forward(ref_out.data(), inp.data(), w.data(), b.data(), N, C, OC);

  // plain + bias
  cu::linear_forward(*x.gemm, t, d_out.get(), nullptr, d_inp.get(), d_w.get(), d_b.get(), nullptr,
                     N, C, OC, lo, nullptr);
  x.r.record("linear_forward bias" + tag, t, rel_err(d_out.download(), ref_out), tol_for(t));
  // + residual
  {
    std::vector<float> expect(N * OC);
    for (int64_t i = 0; i < N * OC; ++i) expect[i] = ref_out[i] + res[i];
    d_out.poison();
    cu::linear_forward(*x.gemm, t, d_out.get(), nullptr, d_inp.get(), d_w.get(), d_b.get(),
                       d_res.get(), N, C, OC, lo, nullptr);
    x.r.record("linear_forward bias+residual" + tag, t, rel_err(d_out.download(), expect), tol_for(t));
  }
  // GELU
  {
    std::vector<float> pre = ref_out, gel(N * OC);
    round_all(t, pre);
    ref.gelu_forward(gel.data(), pre.data(), N * OC);
    d_out.poison();
    cu::linear_forward(*x.gemm, t, d_out.get(), d_pre.get(), d_inp.get(), d_w.get(), d_b.get(),
                       nullptr, N, C, OC, lo, nullptr);
    x.r.record("linear_forward gelu (pre)" + tag, t, rel_err(d_pre.download(), ref_out), tol_for(t));
    x.r.record("linear_forward gelu (out)" + tag, t, rel_err(d_out.download(), gel), tol_for(t));
  }
  // backward: dinp, dweight, dbias
  {
    auto dout = randn(N * OC, x.rng);
    round_all(t, dout);
    auto dw0 = randn(OC * C, x.rng);  // gradients accumulate onto these
    std::vector<float> dinp(N * C), dw = dw0, db(OC, 0.0f);
    ref.matmul_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), N, C, OC);
    DevBuf d_dout(t, N * OC), d_dinp(t, N * C), d_dw(DType::f32, OC * C), d_db(DType::f32, OC);
    d_dout.upload(dout);
    d_dw.upload(dw0);
    cu::linear_backward_input(*x.gemm, t, d_dinp.get(), d_dout.get(), d_w.get(), N, C, OC, OC,
                              1.0f, nullptr, nullptr, x.scratch, lo, nullptr);
    x.r.record("linear_backward dinp" + tag, t, rel_err(d_dinp.download(), dinp), tol_for(t));
    cu::linear_backward_weight(*x.gemm, t, d_dw.f(), d_db.f(), d_dout.get(), d_inp.get(), N, C, OC,
                               OC, 1.0f, x.scratch, lo, nullptr);
    std::vector<float> got = d_dw.download(), dw_inc(OC * C), got_inc(OC * C);
    for (int64_t i = 0; i < OC * C; ++i) {
      dw_inc[i] = dw[i] - dw0[i];
      got_inc[i] = got[i] - dw0[i];
    }
    x.r.record("linear_backward dweight (+=)" + tag, t, rel_err(got_inc, dw_inc), tol_for(t, 1e-5));
    x.r.record("linear_backward dbias" + tag, t, rel_err(d_db.download(), db), tol_for(t, 1e-5));
    // with GELU: dinp = gelu'(pre) * (dout @ W), its column sums = the bias gradient
    auto pre = randn(N * C, x.rng);
    round_all(t, pre);
    std::vector<float> dg(N * C), dbg(C, 0.0f);
    ref.gelu_backward(dg.data(), pre.data(), dinp.data(), N * C);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < C; ++c) dbg[c] += dg[n * C + c];
    DevBuf d_pre2(t, N * C), d_dbg(DType::f32, C);
    d_pre2.upload(pre);
    d_dinp.poison();
    cu::linear_backward_input(*x.gemm, t, d_dinp.get(), d_dout.get(), d_w.get(), N, C, OC, OC,
                              1.0f, d_pre2.get(), d_dbg.f(), x.scratch, lo, nullptr);
    x.r.record("linear_backward dgelu" + tag, t, rel_err(d_dinp.download(), dg), tol_for(t));
    x.r.record("linear_backward dgelu bias" + tag, t, rel_err(d_dbg.download(), dbg), tol_for(t));
  }
}

// The tied LM head: only the first OC of ld columns of dout, with alpha.
void check_lm_head(Ctx& x, DType t) {
  const auto& ref = ops::reference_backend();
  const int64_t N = 96, C = 64, V = 500, Vp = 512;
  const float alpha = 0.5f;
  auto lnf = randn(N * C, x.rng), dlog = randn(N * Vp, x.rng), w = randn(Vp * C, x.rng, 0.05f);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t v = V; v < Vp; ++v) dlog[n * Vp + v] = 0.0f;
  for (int64_t v = V; v < Vp; ++v)
    for (int64_t c = 0; c < C; ++c) w[v * C + c] = 0.0f;
  round_all(t, lnf);
  round_all(t, dlog);
  round_all(t, w);
  std::vector<float> dlog_packed(N * V);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t v = 0; v < V; ++v) dlog_packed[n * V + v] = alpha * dlog[n * Vp + v];
  std::vector<float> dinp(N * C), dw(V * C, 0.0f);
  ref.matmul_backward(dinp.data(), dw.data(), nullptr, dlog_packed.data(), lnf.data(), w.data(), N,
                      C, V);
  DevBuf d_lnf(t, N * C), d_dlog(t, N * Vp), d_w(t, Vp * C), d_dinp(t, N * C), d_dw(DType::f32, V * C);
  d_lnf.upload(lnf);
  d_dlog.upload(dlog);
  d_w.upload(w);
  d_dw.zero();
  cu::LinearOptions lo;
  cu::linear_backward_input(*x.gemm, t, d_dinp.get(), d_dlog.get(), d_w.get(), N, C, Vp, Vp, alpha,
                            nullptr, nullptr, x.scratch, lo, nullptr);
  cu::linear_backward_weight(*x.gemm, t, d_dw.f(), nullptr, d_dlog.get(), d_lnf.get(), N, C, V, Vp,
                             alpha, x.scratch, lo, nullptr);
  x.r.record("lm_head dlnf (padded vocab, alpha)", t, rel_err(d_dinp.download(), dinp), tol_for(t));
  x.r.record("lm_head dwte (ld > OC, alpha)", t, rel_err(d_dw.download(), dw), tol_for(t, 1e-5));
}

// --------------------------------------------------------------------------------------

void check_layernorm(Ctx& x, DType t, int64_t N, int64_t C) {
  const auto& ref = ops::reference_backend();
  const std::string tag = " N=" + std::to_string(N) + " C=" + std::to_string(C);
  auto inp = randn(N * C, x.rng, 2.0f), w = randn(C, x.rng), b = randn(C, x.rng);
  for (int64_t i = 0; i < N * C; ++i) inp[i] += 0.5f;
  round_all(t, inp);
  round_all(t, w);
  round_all(t, b);
  std::vector<float> out(N * C), mean(N), rstd(N);
  ref.layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C);
  DevBuf d_inp(t, N * C), d_w(t, C), d_b(t, C), d_out(t, N * C), d_mean(DType::f32, N),
      d_rstd(DType::f32, N);
  d_inp.upload(inp);
  d_w.upload(w);
  d_b.upload(b);
  cu::layernorm_forward(t, d_out.get(), d_mean.f(), d_rstd.f(), d_inp.get(), d_w.get(), d_b.get(), N,
                        C, nullptr);
  x.r.record("layernorm_forward out" + tag, t, rel_err(d_out.download(), out), tol_for(t));
  x.r.record("layernorm_forward mean" + tag, t, rel_err(d_mean.download(), mean), 1e-5);
  x.r.record("layernorm_forward rstd" + tag, t, rel_err(d_rstd.download(), rstd), 1e-5);

  auto dout = randn(N * C, x.rng), dinp0 = randn(N * C, x.rng);
  round_all(t, dout);
  round_all(t, dinp0);
  auto dw0 = randn(C, x.rng), db0 = randn(C, x.rng), cs0 = randn(C, x.rng);
  std::vector<float> dinp = dinp0, dw = dw0, db = db0;
  ref.layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(),
                         mean.data(), rstd.data(), N, C);
  std::vector<float> cs = cs0;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) cs[c] += round_to(t, dinp[n * C + c]);
  DevBuf d_dout(t, N * C), d_dinp(t, N * C), d_dw(DType::f32, C), d_db(DType::f32, C),
      d_cs(DType::f32, C);
  d_dout.upload(dout);
  d_dinp.upload(dinp0);
  d_dw.upload(dw0);
  d_db.upload(db0);
  d_cs.upload(cs0);
  // Use the device's own mean / rstd (as the model does).
  cu::layernorm_backward(t, d_dinp.get(), d_dw.f(), d_db.f(), d_cs.f(), d_dout.get(), d_inp.get(),
                         d_w.get(), d_mean.f(), d_rstd.f(), N, C, true, x.scratch, nullptr);
  x.r.record("layernorm_backward dinp (+=)" + tag, t, rel_err(d_dinp.download(), dinp), tol_for(t));
  auto inc = [](std::vector<float> a, const std::vector<float>& a0) {
    for (size_t i = 0; i < a.size(); ++i) a[i] -= a0[i];
    return a;
  };
  x.r.record("layernorm_backward dweight" + tag, t, rel_err(inc(d_dw.download(), dw0), inc(dw, dw0)), tol_for(t, 1e-4));
  x.r.record("layernorm_backward dbias" + tag, t, rel_err(inc(d_db.download(), db0), inc(db, db0)), tol_for(t, 1e-4));
  x.r.record("layernorm_backward dinp colsum" + tag, t, rel_err(inc(d_cs.download(), cs0), inc(cs, cs0)), tol_for(t, 1e-4));
  // overwrite mode
  d_dinp.poison();
  std::vector<float> dinp_ow(N * C, 0.0f), dwx(C, 0.0f), dbx(C, 0.0f);
  ref.layernorm_backward(dinp_ow.data(), dwx.data(), dbx.data(), dout.data(), inp.data(), w.data(),
                         mean.data(), rstd.data(), N, C);
  cu::layernorm_backward(t, d_dinp.get(), d_dw.f(), d_db.f(), nullptr, d_dout.get(), d_inp.get(),
                         d_w.get(), d_mean.f(), d_rstd.f(), N, C, false, x.scratch, nullptr);
  x.r.record("layernorm_backward dinp (=)" + tag, t, rel_err(d_dinp.download(), dinp_ow), tol_for(t));
}

// --------------------------------------------------------------------------------------

void check_attention(Ctx& x, DType t, int64_t B, int64_t T, int64_t NH, int64_t HS,
                     cu::AttentionImpl impl) {
  const auto& ref = ops::reference_backend();
  const int64_t C = NH * HS;
  const std::string tag = std::string(impl == cu::AttentionImpl::simple ? " simple"
                                      : impl == cu::AttentionImpl::cudnn ? " cudnn"
                                      : impl == cu::AttentionImpl::flash_narrow ? " flash16"
                                      : impl == cu::AttentionImpl::flash_occ3 ? " flash-occ3"
                                      : impl == cu::AttentionImpl::flash_two_barrier ? " flash-2bar"
                                                                                 : " flash") +
                          " B=" + std::to_string(B) + " T=" + std::to_string(T) + " NH=" +
                          std::to_string(NH) + " HS=" + std::to_string(HS);
  // cuDNN's fused engines: a stateful object with its own plans and workspace.
  std::unique_ptr<cu::CudnnAttention> cudnn;
  DevBuf d_ws(DType::f32, 4);
  if (impl == cu::AttentionImpl::cudnn) {
    cudnn = std::make_unique<cu::CudnnAttention>(t, B, T, NH, HS);
    d_ws = DevBuf(DType::f32, int64_t(cudnn->workspace_bytes() / 4 + 4));
  }
  auto qkv = randn(B * T * 3 * C, x.rng);
  round_all(t, qkv);
  std::vector<float> out(B * T * C), att(B * NH * T * T);
  ref.attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
  DevBuf d_qkv(t, B * T * 3 * C), d_out(t, B * T * C), d_lse(DType::f32, B * NH * T);
  d_qkv.upload(qkv);
  if (cudnn)
    cudnn->forward(d_out.get(), d_lse.f(), d_qkv.get(), d_ws.get(), nullptr);
  else
    cu::attention_forward(t, d_out.get(), d_lse.f(), d_qkv.get(), B, T, C, NH, impl, nullptr);
  const double tol = tol_for(t, 1e-4);
  x.r.record("attention_forward" + tag, t, rel_err(d_out.download(), out), tol);

  auto dout = randn(B * T * C, x.rng);
  round_all(t, dout);
  std::vector<float> dqkv(B * T * 3 * C), datt(B * NH * T * T);
  // The reference differentiates through its own out; the device uses its rounded out
  // (as training does). Feed the reference the same att.
  ref.attention_backward(dqkv.data(), datt.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH);
  DevBuf d_dout(t, B * T * C), d_dqkv(t, B * T * 3 * C), d_dq(DType::f32, B * T * C),
      d_delta(DType::f32, B * NH * T);
  d_dout.upload(dout);
  if (cudnn)
    cudnn->backward(d_dqkv.get(), d_dout.get(), d_qkv.get(), d_out.get(), d_lse.f(), d_dq.f(),
                    d_delta.f(), d_ws.get(), nullptr);
  else
    cu::attention_backward(t, d_dqkv.get(), d_dout.get(), d_qkv.get(), d_out.get(), d_lse.f(), B,
                           T, C, NH, d_dq.f(), d_delta.f(), impl, nullptr);
  auto got = d_dqkv.download();
  // Per part (dQ, dK, dV) so that a wrong one is named.
  for (int part = 0; part < 3; ++part) {
    std::vector<float> a, b;
    for (int64_t r = 0; r < B * T; ++r)
      for (int64_t c = 0; c < C; ++c) {
        a.push_back(got[r * 3 * C + part * C + c]);
        b.push_back(dqkv[r * 3 * C + part * C + c]);
      }
    const char* names[] = {" dQ", " dK", " dV"};
    x.r.record("attention_backward" + std::string(names[part]) + tag, t, rel_err(a, b), tol);
  }
}

// --------------------------------------------------------------------------------------

void check_softmax_xent(Ctx& x, DType t, int64_t N, int64_t V, int64_t Vp) {
  const auto& ref = ops::reference_backend();
  const std::string tag = " N=" + std::to_string(N) + " V=" + std::to_string(V);
  auto logits = randn(N * V, x.rng, 3.0f);
  round_all(t, logits);
  std::vector<int32_t> targets(N);
  std::uniform_int_distribution<int32_t> tok(0, int32_t(V - 1));
  for (auto& v : targets) v = tok(x.rng);
  std::vector<float> losses(N), dl(N * V), dlosses(N, 0.25f / N);
  ref.softmax_xent_forward(losses.data(), logits.data(), targets.data(), N, V);
  ref.softmax_xent_backward(dl.data(), logits.data(), targets.data(), dlosses.data(), N, V);
  std::vector<float> padded(N * Vp, 0.0f), dl_padded(N * Vp, 0.0f);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t v = 0; v < V; ++v) {
      padded[n * Vp + v] = logits[n * V + v];
      dl_padded[n * Vp + v] = dl[n * V + v];
    }
  // Padded columns hold garbage that must not matter (the GEMM writes zeros there).
  for (int64_t n = 0; n < N; ++n)
    for (int64_t v = V; v < Vp; ++v) padded[n * Vp + v] = 100.0f;
  DevBuf d_logits(t, N * Vp), d_losses(DType::f32, N), d_targets(DType::f32, N),
      d_mean(DType::f32, 1);
  d_logits.upload(padded);
  d_targets.upload_raw(targets.data(), N * 4);
  cu::softmax_xent(t, d_losses.f(), d_logits.get(), static_cast<const int32_t*>(d_targets.get()), N,
                   V, Vp, 0.25f / N, true, nullptr);
  x.r.record("softmax_xent losses" + tag, t, rel_err(d_losses.download(), losses), tol_for(t, 1e-5));
  x.r.record("softmax_xent dlogits (in place)" + tag, t, rel_err(d_logits.download(), dl_padded),
             tol_for(t, 1e-5));
  cu::mean_reduce(d_mean.f(), d_losses.f(), N, nullptr);
  double m = 0.0;
  for (float l : losses) m += l;
  m /= double(N);
  x.r.record("mean_reduce" + tag, t, rel_err(d_mean.download(), {float(m)}), tol_for(t, 1e-5));
}

void check_embedding(Ctx& x, DType t) {
  const auto& ref = ops::reference_backend();
  const int64_t B = 3, T = 50, C = 64, V = 40, maxT = 64;
  auto wte = randn(V * C, x.rng), wpe = randn(maxT * C, x.rng);
  round_all(t, wte);
  round_all(t, wpe);
  std::vector<int32_t> tokens(B * T);
  std::uniform_int_distribution<int32_t> tok(0, int32_t(V - 1));
  for (auto& v : tokens) v = tok(x.rng);
  tokens[7] = tokens[9] = tokens[100] = 3;  // repeats
  std::vector<float> out(B * T * C);
  ref.embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
  DevBuf d_wte(t, V * C), d_wpe(t, maxT * C), d_out(t, B * T * C), d_tok(DType::f32, B * T);
  d_wte.upload(wte);
  d_wpe.upload(wpe);
  d_tok.upload_raw(tokens.data(), B * T * 4);
  cu::embedding_forward(t, d_out.get(), static_cast<const int32_t*>(d_tok.get()), d_wte.get(),
                        d_wpe.get(), B, T, C, nullptr);
  x.r.record("embedding_forward", t, rel_err(d_out.download(), out), tol_for(t));

  auto dout = randn(B * T * C, x.rng);
  round_all(t, dout);
  auto dwte0 = randn(V * C, x.rng), dwpe0 = randn(maxT * C, x.rng);
  std::vector<float> dwte = dwte0, dwpe = dwpe0;
  ref.embedding_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C);
  const int64_t N = B * T;
  std::vector<int32_t> buckets(3 * N + 1), counts;
  const int64_t nu = cu::build_token_buckets(tokens.data(), N, V, buckets.data(),
                                             buckets.data() + N, buckets.data() + 2 * N + 1, counts);
  DevBuf d_dout(t, N * C), d_dwte(DType::f32, V * C), d_dwpe(DType::f32, maxT * C),
      d_b(DType::f32, 3 * N + 1);
  d_dout.upload(dout);
  d_dwte.upload(dwte0);
  d_dwpe.upload(dwpe0);
  d_b.upload_raw(buckets.data(), buckets.size() * 4);
  const int32_t* bp = static_cast<const int32_t*>(d_b.get());
  cu::embedding_backward(t, d_dwte.f(), d_dwpe.f(), d_dout.get(), bp, bp + N, bp + 2 * N + 1, nu, B,
                         T, C, nullptr);
  x.r.record("embedding_backward dwte", t, rel_err(d_dwte.download(), dwte), 1e-6);
  x.r.record("embedding_backward dwpe", t, rel_err(d_dwpe.download(), dwpe), 1e-6);
}

void check_small_ops(Ctx& x, DType t) {
  const auto& ref = ops::reference_backend();
  const int64_t n = 4096 + 64;
  auto a = randn(n, x.rng, 2.0f), b = randn(n, x.rng);
  round_all(t, a);
  round_all(t, b);
  std::vector<float> g(n), dg(n);
  ref.gelu_forward(g.data(), a.data(), n);
  ref.gelu_backward(dg.data(), a.data(), b.data(), n);
  DevBuf d_a(t, n), d_b(t, n), d_o(t, n);
  d_a.upload(a);
  d_b.upload(b);
  cu::gelu_forward(t, d_o.get(), d_a.get(), n, nullptr);
  x.r.record("gelu_forward", t, rel_err(d_o.download(), g), tol_for(t));
  cu::gelu_backward(t, d_o.get(), d_a.get(), d_b.get(), n, nullptr);
  x.r.record("gelu_backward", t, rel_err(d_o.download(), dg), tol_for(t));
  std::vector<float> s(n);
  ref.residual_forward(s.data(), a.data(), b.data(), n);
  cu::residual_forward(t, d_o.get(), d_a.get(), d_b.get(), n, nullptr);
  x.r.record("residual_forward", t, rel_err(d_o.download(), s), tol_for(t));
  // bias_grad (column sums)
  const int64_t N = 333, OC = 264;
  auto m = randn(N * OC, x.rng);
  round_all(t, m);
  std::vector<float> cs(OC, 0.0f);
  for (int64_t r = 0; r < N; ++r)
    for (int64_t c = 0; c < OC; ++c) cs[c] += m[r * OC + c];
  DevBuf d_m(t, N * OC), d_cs(DType::f32, OC);
  d_m.upload(m);
  cu::bias_grad(t, d_cs.f(), d_m.get(), N, OC, false, x.scratch, nullptr);
  x.r.record("bias_grad (column sums)", t, rel_err(d_cs.download(), cs), 1e-5);
}

void check_adamw(Ctx& x, DType t) {
  const auto& ref = ops::reference_backend();
  const int64_t n = 10000 + 3;  // not a multiple of 4: exercises the tail
  auto p = randn(n, x.rng), gr = randn(n, x.rng, 0.1f), m = randn(n, x.rng, 0.01f), v = randn(n, x.rng, 0.01f);
  for (auto& e : v) e = e * e;
  ops::AdamWParams hp;
  hp.lr = 1e-3f;
  hp.weight_decay = 0.1f;
  hp.step = 3;
  hp.grad_scale = 0.7f;
  std::vector<float> rp = p, rm = m, rv = v;
  ref.adamw_update(rp.data(), gr.data(), rm.data(), rv.data(), n, hp);
  DevBuf d_p(DType::f32, n), d_g(DType::f32, n), d_m(DType::f32, n), d_v(DType::f32, n), d_w(t, n);
  d_p.upload(p);
  d_g.upload(gr);
  d_m.upload(m);
  d_v.upload(v);
  cu::AdamWLayout L;
  L.n = n;
  L.embeddings_end = n;  // everything decays
  L.decay_embeddings = true;
  L.work_split = n;
  cu::adamw_update(t, d_p.f(), d_w.get(), d_g.f(), d_m.f(), d_v.f(), L, hp, nullptr);
  x.r.record("adamw params", t, rel_err(d_p.download(), rp), 1e-6);
  x.r.record("adamw m", t, rel_err(d_m.download(), rm), 1e-6);
  x.r.record("adamw v", t, rel_err(d_v.download(), rv), 1e-6);
  auto rw = rp;
  round_all(t, rw);
  x.r.record("adamw working copy", t, rel_err(d_w.download(), rw), 1e-6);
  // A ZeRO-1 shard: flat range [begin, end) with the state stored from state_offset; begin
  // odd (no float4 path). Outside the range nothing may change.
  {
    const int64_t begin = 1237, end = 7001, off = 5;
    const int64_t k = end - begin;
    std::vector<float> sp(off + k + 3), sm(off + k + 3), sv(off + k + 3);
    for (int64_t i = 0; i < k; ++i) {
      sp[size_t(off + i)] = p[size_t(begin + i)];
      sm[size_t(off + i)] = m[size_t(begin + i)];
      sv[size_t(off + i)] = v[size_t(begin + i)];
    }
    DevBuf s_p(DType::f32, int64_t(sp.size())), s_m(DType::f32, int64_t(sp.size())),
        s_v(DType::f32, int64_t(sp.size())), s_w(t, n);
    s_p.upload(sp);
    s_m.upload(sm);
    s_v.upload(sv);
    std::vector<float> zeros(size_t(n), 0.0f);
    s_w.upload(zeros);
    cu::AdamWLayout S = L;
    S.begin = begin;
    S.n = end;
    S.state_offset = off;
    S.work_split = std::numeric_limits<int64_t>::max();
    cu::adamw_update(t, s_p.f(), s_w.get(), d_g.f(), s_m.f(), s_v.f(), S, hp, nullptr);
    auto gp = s_p.download(), gw = s_w.download();
    std::vector<float> want_p(static_cast<size_t>(k)), got_p(static_cast<size_t>(k)),
        want_w(static_cast<size_t>(n), 0.0f);
    for (int64_t i = 0; i < k; ++i) {
      want_p[size_t(i)] = rp[size_t(begin + i)];
      got_p[size_t(i)] = gp[size_t(off + i)];
      want_w[size_t(begin + i)] = rw[size_t(begin + i)];
    }
    x.r.record("adamw shard params", t, rel_err(got_p, want_p), 1e-6);
    x.r.record("adamw shard working copy (zero outside)", t, rel_err(gw, want_w), 1e-6);
    x.r.record("adamw shard leaves state outside", DType::f32, std::fabs(gp[0]) + std::fabs(gp[size_t(off + k)]), 0.0);
  }
  // sum of squares
  DevBuf d_ss(DType::f32, 2), d_scr(DType::f32, 2 * cu::sum_squares_scratch_doubles());
  cu::sum_squares(reinterpret_cast<double*>(d_ss.get()), d_g.f(), n,
                  reinterpret_cast<double*>(d_scr.get()), nullptr);
  double got = 0.0;
  check_cuda(cudaDeviceSynchronize(), "sum_squares");
  check_cuda(cudaMemcpy(&got, d_ss.get(), 8, cudaMemcpyDeviceToHost), "D2H");
  const double want = ops::sum_squares(gr.data(), n);
  x.r.record("sum_squares", DType::f32, std::fabs(got - want) / want, 1e-6);
}

// --------------------------------------------------------------------------------------
// The whole model: CUDA vs the CPU model on the same parameters and tokens.

struct ModelCase {
  const char* name;
  nn::GptConfig config;
  int64_t B, T;
};

void check_model(Results& r, const ModelCase& mc, DType t, bool recompute) {
  using nn::GptRunOptions;
  const nn::GptConfig& c = mc.config;
  GptRunOptions o;
  o.batch = mc.B;
  o.seq = mc.T;
  o.seed = 42;
  o.cpu_backend = "reference";
  auto cpu = nn::make_gpt_cpu(c, o);
  o.precision = t;
  o.recompute = recompute;
  auto gpu = nn::make_gpt_cuda(c, o);
  const std::string tag = std::string("model ") + mc.name + (recompute ? " recompute" : "");
  const int64_t N = mc.B * mc.T, P = c.num_params();
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> tok(0, int32_t(c.vocab_size - 1));
  std::vector<int32_t> in(N), tg(N);
  for (auto& v : in) v = tok(rng);
  for (auto& v : tg) v = tok(rng);
  // Same parameters bit for bit (the CUDA model starts from its fp32 master copy).
  std::vector<float> params(P);
  cpu->get_params(params.data());
  gpu->set_params(params.data());

  const double loss_tol = t == DType::f32 ? 1e-5 : 1e-2;
  const double grad_tol = t == DType::f32 ? 1e-3 : 6e-2;
  // logits without targets (kept as logits)
  {
    cpu->forward(in.data(), nullptr);
    gpu->forward(in.data(), nullptr);
    std::vector<float> a(c.vocab_size), b(c.vocab_size);
    cpu->logits_at(1, mc.T - 1, a.data());
    gpu->logits_at(1, mc.T - 1, b.data());
    r.record(tag + " logits (no targets)", t, rel_err(b, a), loss_tol * 3);
  }
  const float lc = cpu->forward(in.data(), tg.data());
  const float lg = gpu->forward(in.data(), tg.data());
  std::printf("  %s: loss cpu %.6f gpu %.6f\n", tag.c_str(), lc, lg);
  r.record(tag + " loss", t, std::fabs(lg - lc) / std::fabs(lc), loss_tol);
  {
    std::vector<float> a(c.vocab_size), b(c.vocab_size);
    cpu->logits_at(0, 3, a.data());
    gpu->logits_at(0, 3, b.data());  // recomputed from ln_f (logits hold dlogits now)
    r.record(tag + " logits (after fused loss)", t, rel_err(b, a), loss_tol * 3);
  }
  cpu->zero_grad();
  gpu->zero_grad();
  cpu->backward(1.0f);
  gpu->backward(1.0f);
  std::vector<float> gc(P), gg(P);
  cpu->get_grads(gc.data());
  gpu->get_grads(gg.data());
  double worst = 0.0;
  std::string worst_name;
  size_t off = 0;
  for (const auto& info : nn::gpt_param_infos(c)) {
    const size_t n = static_cast<size_t>(info.shape.numel());
    std::vector<float> a(gg.begin() + off, gg.begin() + off + n), b(gc.begin() + off, gc.begin() + off + n);
    const double e = rel_err(a, b);
    if (e > worst || !std::isfinite(e)) {
      worst = e;
      worst_name = info.name;
    }
    if (e > grad_tol) std::printf("  grad %-28s rel_err %.3e\n", info.name.c_str(), e);
    off += n;
  }
  r.record(tag + " grads (worst: " + worst_name + ")", t, worst, grad_tol);
  const double sc = cpu->grad_sum_squares(), sg = gpu->grad_sum_squares();
  r.record(tag + " grad sum of squares", t, std::fabs(sg - sc) / sc, grad_tol);

  // A few AdamW steps; losses should track.
  ops::AdamWParams hp;
  hp.lr = 1e-3f;
  hp.weight_decay = 0.1f;
  double worst_loss = std::fabs(lg - lc) / std::fabs(lc);
  for (int step = 1; step <= 3; ++step) {
    hp.step = step;
    cpu->update(hp);
    gpu->update(hp);
    cpu->zero_grad();
    gpu->zero_grad();
    const float a = cpu->forward(in.data(), tg.data());
    const float b = gpu->forward(in.data(), tg.data());
    cpu->backward(1.0f);
    gpu->backward(1.0f);
    std::printf("  %s: step %d loss cpu %.6f gpu %.6f\n", tag.c_str(), step, a, b);
    worst_loss = std::max(worst_loss, double(std::fabs(a - b) / std::fabs(a)));
  }
  r.record(tag + " loss over 3 AdamW steps", t, worst_loss, loss_tol * 3);
  {
    std::vector<float> pc(P), pg(P);
    cpu->get_params(pc.data());
    gpu->get_params(pg.data());
    r.record(tag + " params after 3 steps", t, rel_err(pg, pc), t == DType::f32 ? 1e-4 : 1e-2);
  }
}

// Properties of the CUDA model alone: grad_multiplier scaling, gradient accumulation,
// recompute giving identical results, determinism of two runs.
void check_model_properties(Results& r, const ModelCase& mc, DType t) {
  const nn::GptConfig& c = mc.config;
  nn::GptRunOptions o;
  o.batch = mc.B;
  o.seq = mc.T;
  o.precision = t;
  auto a = nn::make_gpt_cuda(c, o);
  o.recompute = true;
  auto b = nn::make_gpt_cuda(c, o);
  const int64_t N = mc.B * mc.T, P = c.num_params();
  std::mt19937 rng(11);
  std::uniform_int_distribution<int32_t> tok(0, int32_t(c.vocab_size - 1));
  std::vector<int32_t> in(N), tg(N);
  for (auto& v : in) v = tok(rng);
  for (auto& v : tg) v = tok(rng);
  std::vector<float> g1(P), g2(P), g3(P);
  a->zero_grad();
  a->forward(in.data(), tg.data());
  a->backward(1.0f);
  a->get_grads(g1.data());
  a->zero_grad();
  a->forward(in.data(), tg.data());
  a->backward(4.0f);  // dlogits were scaled for 1: alpha = 4 corrects
  a->get_grads(g2.data());
  for (auto& v : g1) v *= 4.0f;
  r.record("model grad_multiplier 4 = 4 x grads", t, rel_err(g2, g1), t == DType::f32 ? 1e-5 : 2e-2);
  a->zero_grad();
  a->forward(in.data(), tg.data());
  a->backward(4.0f);
  a->forward(in.data(), tg.data());
  a->backward(4.0f);  // accumulates
  a->get_grads(g3.data());
  for (auto& v : g1) v *= 2.0f;
  r.record("model gradient accumulation (2 micro-steps)", t, rel_err(g3, g1), t == DType::f32 ? 1e-5 : 2e-2);
  // recompute: same numbers
  std::vector<float> ga(P), gb(P);
  a->zero_grad();
  b->zero_grad();
  const float la = a->forward(in.data(), tg.data());
  const float lb = b->forward(in.data(), tg.data());
  a->backward(1.0f);
  b->backward(1.0f);
  a->get_grads(ga.data());
  b->get_grads(gb.data());
  r.check("model recompute: same loss", la == lb);
  // dQ uses fp32 atomics (order varies): allow rounding-level differences.
  r.record("model recompute: same grads", t, rel_err(gb, ga), t == DType::f32 ? 1e-6 : 5e-3);
  std::printf("  memory: %.1f MiB without recompute, %.1f MiB with\n",
              double(a->memory_bytes()) / 1048576.0, double(b->memory_bytes()) / 1048576.0);
}

// --------------------------------------------------------------------------------------
// --profile: each hot kernel once at 124M sizes (run under ncu)

void profile_once(float* scratch) {
  const DType t = DType::bf16;
  const int64_t B = 16, T = 1024, C = 768, NH = 12, N = B * T;
  std::mt19937 rng(5);
  DevBuf x(t, N * 4 * C), y(t, N * 4 * C), z(t, N * 4 * C), w(t, 4 * C), mean(DType::f32, N),
      rstd(DType::f32, N), lse(DType::f32, B * NH * T), dq(DType::f32, N * C),
      delta(DType::f32, B * NH * T), gb(DType::f32, 4 * C);
  x.upload(randn(x.size(), rng));
  y.upload(randn(y.size(), rng));
  z.upload(randn(z.size(), rng));
  w.upload(randn(w.size(), rng));
  cu::attention_forward(t, y.get(), lse.f(), x.get(), B, T, C, NH, cu::AttentionImpl::flash, nullptr);
  cu::attention_backward(t, z.get(), x.get(), x.get(), y.get(), lse.f(), B, T, C, NH, dq.f(),
                         delta.f(), cu::AttentionImpl::flash, nullptr);
  cu::layernorm_forward(t, y.get(), mean.f(), rstd.f(), x.get(), w.get(), w.get(), N, C, nullptr);
  cu::layernorm_backward(t, z.get(), gb.f(), gb.f() + C, gb.f() + 2 * C, x.get(), y.get(), w.get(),
                         mean.f(), rstd.f(), N, C, true, scratch, nullptr);
  cu::gelu_backward_bias(t, y.get(), x.get(), N, 4 * C, gb.f(), scratch, nullptr);
  check_cuda(cudaDeviceSynchronize(), "profile");
}

// --------------------------------------------------------------------------------------
// --perf: per-op timings at GPT-2 124M sizes

double time_ms(const std::function<void()>& f, int reps = 20) {
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  for (int i = 0; i < 3; ++i) f();
  std::vector<float> ts;
  for (int i = 0; i < reps; ++i) {
    cudaEventRecord(e0);
    f();
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    ts.push_back(ms);
  }
  check_cuda(cudaGetLastError(), "perf");
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  std::sort(ts.begin(), ts.end());
  return ts[ts.size() / 2];
}

void perf(cu::Gemm& gemm, float* scratch, int64_t B, int64_t T, int64_t C, int64_t NH,
          bool gemms_only = false) {
  const DType t = DType::bf16;
  const int64_t N = B * T, V = 50257, Vp = 50304;
  std::mt19937 rng(3);
  auto fill = [&](DevBuf& d, float s) { d.upload(randn(d.size(), rng, s)); };
  DevBuf x(t, N * 4 * C), y(t, N * 4 * C), z(t, N * 4 * C), w(t, Vp * C), bias(t, 4 * C),
      g(DType::f32, Vp * C), gb(DType::f32, 4 * C), lg(t, N * Vp), mean(DType::f32, N),
      rstd(DType::f32, N), lse(DType::f32, B * NH * T), dq(DType::f32, N * C),
      delta(DType::f32, B * NH * T), losses(DType::f32, N), tg(DType::f32, N);
  fill(x, 1.0f);
  fill(y, 1.0f);
  fill(z, 1.0f);
  fill(w, 0.02f);
  fill(bias, 0.1f);
  g.zero();
  fill(lg, 1.0f);
  std::vector<int32_t> targets(N);
  for (auto& v : targets) v = int32_t(rng() % V);
  tg.upload_raw(targets.data(), N * 4);
  cu::LinearOptions lo;
  std::printf("\nper-op times, bf16, B=%lld T=%lld C=%lld NH=%lld (median of 20)\n", (long long)B,
              (long long)T, (long long)C, (long long)NH);
  std::printf("%-40s %9s %10s\n", "op", "ms", "TFLOP/s|GB/s");
  auto gemm_line = [&](const char* name, int64_t K, int64_t M, const std::function<void()>& f) {
    const double ms = time_ms(f);
    std::printf("%-40s %9.3f %8.0f TF\n", name, ms, 2.0 * N * K * M / (ms * 1e9));
  };
  auto mem_line = [&](const char* name, double bytes, const std::function<void()>& f) {
    const double ms = time_ms(f);
    std::printf("%-40s %9.3f %8.0f GB/s\n", name, ms, bytes / (ms * 1e6));
  };
  gemm_line("fwd qkv C->3C +bias", C, 3 * C, [&] {
    cu::linear_forward(gemm, t, y.get(), nullptr, x.get(), w.get(), bias.get(), nullptr, N, C, 3 * C, lo, nullptr);
  });
  gemm_line("fwd attproj C->C +bias+res", C, C, [&] {
    cu::linear_forward(gemm, t, y.get(), nullptr, x.get(), w.get(), bias.get(), z.get(), N, C, C, lo, nullptr);
  });
  gemm_line("fwd fc C->4C +bias+gelu(aux)", C, 4 * C, [&] {
    cu::linear_forward(gemm, t, y.get(), z.get(), x.get(), w.get(), bias.get(), nullptr, N, C, 4 * C, lo, nullptr);
  });
  gemm_line("fwd fcproj 4C->C +bias+res", 4 * C, C, [&] {
    cu::linear_forward(gemm, t, y.get(), nullptr, x.get(), w.get(), bias.get(), z.get(), N, 4 * C, C, lo, nullptr);
  });
  gemm_line("fwd lm head C->Vp", C, Vp, [&] {
    cu::linear_forward(gemm, t, lg.get(), nullptr, x.get(), w.get(), nullptr, nullptr, N, C, Vp, lo, nullptr);
  });
  gemm_line("bwd dX qkv", C, 3 * C, [&] {
    cu::linear_backward_input(gemm, t, y.get(), x.get(), w.get(), N, C, 3 * C, 3 * C, 1.0f, nullptr, nullptr, scratch, lo, nullptr);
  });
  gemm_line("bwd dW qkv (+bgrad)", C, 3 * C, [&] {
    cu::linear_backward_weight(gemm, t, g.f(), gb.f(), x.get(), y.get(), N, C, 3 * C, 3 * C, 1.0f, scratch, lo, nullptr);
  });
  gemm_line("bwd dX fcproj (+dgelu+bgrad)", 4 * C, C, [&] {
    cu::linear_backward_input(gemm, t, y.get(), x.get(), w.get(), N, 4 * C, C, C, 1.0f, z.get(), gb.f(), scratch, lo, nullptr);
  });
  gemm_line("bwd dW fcproj", 4 * C, C, [&] {
    cu::linear_backward_weight(gemm, t, g.f(), nullptr, x.get(), y.get(), N, 4 * C, C, C, 1.0f, scratch, lo, nullptr);
  });
  gemm_line("bwd dX fc", C, 4 * C, [&] {
    cu::linear_backward_input(gemm, t, y.get(), x.get(), w.get(), N, C, 4 * C, 4 * C, 1.0f, nullptr, nullptr, scratch, lo, nullptr);
  });
  gemm_line("bwd dW fc", C, 4 * C, [&] {
    cu::linear_backward_weight(gemm, t, g.f(), nullptr, x.get(), y.get(), N, C, 4 * C, 4 * C, 1.0f, scratch, lo, nullptr);
  });
  gemm_line("bwd dX lm head", C, Vp, [&] {
    cu::linear_backward_input(gemm, t, y.get(), lg.get(), w.get(), N, C, Vp, Vp, 1.0f, nullptr, nullptr, scratch, lo, nullptr);
  });
  gemm_line("bwd dW lm head", C, V, [&] {
    cu::linear_backward_weight(gemm, t, g.f(), nullptr, lg.get(), x.get(), N, C, V, Vp, 1.0f, scratch, lo, nullptr);
  });
  gemm_line("bwd dW lm head (n = Vp)", C, Vp, [&] {
    cu::linear_backward_weight(gemm, t, g.f(), nullptr, lg.get(), x.get(), N, C, Vp, Vp, 1.0f, scratch, lo, nullptr);
  });
  {
    cu::LinearOptions lo2 = lo;
    lo2.fused_dgelu = !lo.fused_dgelu;
    gemm_line(lo2.fused_dgelu ? "bwd dX fcproj (dgelu epilogue)" : "bwd dX fcproj (plain + dgelu/bias kernel)", 4 * C, C, [&] {
      cu::linear_backward_input(gemm, t, y.get(), x.get(), w.get(), N, 4 * C, C, C, 1.0f, z.get(), gb.f(), scratch, lo2, nullptr);
    });
    cu::LinearOptions lo3 = lo;
    lo3.fused_bgrad = false;
    gemm_line("bwd dW qkv (+bias kernel)", C, 3 * C, [&] {
      cu::linear_backward_weight(gemm, t, g.f(), gb.f(), x.get(), y.get(), N, C, 3 * C, 3 * C, 1.0f, scratch, lo3, nullptr);
    });
  }
  if (gemms_only) return;
  const double att_flops_fwd = 4.0 * B * NH * (double(T) * T / 2) * (C / NH);
  {
    const double ms = time_ms([&] {
      cu::attention_forward(t, y.get(), lse.f(), x.get(), B, T, C, NH, cu::AttentionImpl::flash, nullptr);
    });
    std::printf("%-40s %9.3f %8.0f TF (causal flops)\n", "attention fwd flash", ms, att_flops_fwd / (ms * 1e9));
    const double ms16 = time_ms([&] {
      cu::attention_forward(t, y.get(), lse.f(), x.get(), B, T, C, NH, cu::AttentionImpl::flash_narrow, nullptr);
    });
    std::printf("%-40s %9.3f %8.0f TF (causal flops)\n", "attention fwd flash (16-row warps)", ms16, att_flops_fwd / (ms16 * 1e9));
    const double msb = time_ms([&] {
      cu::attention_backward(t, z.get(), x.get(), x.get(), y.get(), lse.f(), B, T, C, NH, dq.f(),
                             delta.f(), cu::AttentionImpl::flash, nullptr);
    });
    std::printf("%-40s %9.3f %8.0f TF (2.5x fwd flops)\n", "attention bwd flash (+delta, dq)", msb,
                2.5 * att_flops_fwd / (msb * 1e9));
    const double msb2 = time_ms([&] {
      cu::attention_backward(t, z.get(), x.get(), x.get(), y.get(), lse.f(), B, T, C, NH, dq.f(),
                             delta.f(), cu::AttentionImpl::flash_two_barrier, nullptr);
    });
    std::printf("%-40s %9.3f %8.0f TF (2.5x fwd flops)\n", "attention bwd flash (two barriers)", msb2,
                2.5 * att_flops_fwd / (msb2 * 1e9));
    if (cu::cudnn_attention_compiled()) try {
      cu::CudnnAttention cudnn(t, B, T, NH, C / NH);
      DevBuf ws(DType::f32, int64_t(cudnn.workspace_bytes() / 4 + 4));
      const double msc = time_ms([&] { cudnn.forward(y.get(), lse.f(), x.get(), ws.get(), nullptr); });
      std::printf("%-40s %9.3f %8.0f TF (causal flops)\n", "attention fwd cudnn", msc,
                  att_flops_fwd / (msc * 1e9));
      const double mscb = time_ms([&] {
        cudnn.backward(z.get(), x.get(), x.get(), y.get(), lse.f(), dq.f(), delta.f(), ws.get(), nullptr);
      });
      std::printf("%-40s %9.3f %8.0f TF (2.5x fwd flops)\n", "attention bwd cudnn", mscb,
                  2.5 * att_flops_fwd / (mscb * 1e9));
      std::printf("  (%s)\n", cudnn.describe().c_str());
    } catch (const std::exception& e) {
      std::printf("attention cudnn: %s\n", e.what());
    }
    const double ms3 = time_ms([&] {
      cu::attention_forward(t, y.get(), lse.f(), x.get(), B, T, C, NH, cu::AttentionImpl::flash_occ3, nullptr);
    });
    std::printf("%-40s %9.3f %8.0f TF (causal flops)\n", "attention fwd flash (3 blocks/SM)", ms3, att_flops_fwd / (ms3 * 1e9));
  }
  mem_line("layernorm fwd", 2.0 * N * C * 2, [&] {
    cu::layernorm_forward(t, y.get(), mean.f(), rstd.f(), x.get(), bias.get(), bias.get(), N, C, nullptr);
  });
  mem_line("layernorm bwd (+=, colsum)", 4.0 * N * C * 2, [&] {
    cu::layernorm_backward(t, z.get(), gb.f(), gb.f() + C, gb.f() + 2 * C, x.get(), y.get(), bias.get(),
                           mean.f(), rstd.f(), N, C, true, scratch, nullptr);
  });
  mem_line("gelu backward + bias (N x 4C)", 2.0 * 3 * N * 4 * C, [&] {
    cu::gelu_backward_bias(t, y.get(), x.get(), N, 4 * C, gb.f(), scratch, nullptr);
  });
  mem_line("bias_grad kernel (N x 3C)", 2.0 * N * 3 * C, [&] {
    cu::bias_grad(t, gb.f(), x.get(), N, 3 * C, true, scratch, nullptr);
  });
  mem_line("gelu fwd (N x 4C)", 2.0 * 2 * N * 4 * C, [&] {
    cu::gelu_forward(t, y.get(), x.get(), N * 4 * C, nullptr);
  });
  mem_line("softmax_xent fused (N x Vp, 2 passes)", 3.0 * N * Vp * 2, [&] {
    cu::softmax_xent(t, losses.f(), lg.get(), static_cast<const int32_t*>(tg.get()), N, V, Vp, 1.0f / N, true, nullptr);
  });
  for (const char* kb : {"80", "60"}) {
    setenv("AISCALE_CUDA_XENT_SMEM_KB", kb, 1);
    const std::string name = std::string("softmax_xent, ") + kb + " KB smem cap";
    mem_line(name.c_str(), 3.0 * N * Vp * 2, [&] {
      cu::softmax_xent(t, losses.f(), lg.get(), static_cast<const int32_t*>(tg.get()), N, V, Vp, 1.0f / N, true, nullptr);
    });
  }
  unsetenv("AISCALE_CUDA_XENT_SMEM_KB");
  {
    const int64_t P = 124475904;
    DevBuf p(DType::f32, P), gg(DType::f32, P), m(DType::f32, P), v(DType::f32, P), wk(t, P + 64);
    p.zero();
    gg.zero();
    m.zero();
    v.zero();
    cu::AdamWLayout L;
    L.n = P;
    L.embeddings_end = P;
    L.work_split = P;
    ops::AdamWParams hp;
    mem_line("adamw (124M params)", 30.0 * P, [&] {
      cu::adamw_update(t, p.f(), wk.get(), gg.f(), m.f(), v.f(), L, hp, nullptr);
    });
    DevBuf ss(DType::f32, 2), scr(DType::f32, 2 * cu::sum_squares_scratch_doubles());
    mem_line("sum_squares (124M)", 4.0 * P, [&] {
      cu::sum_squares(reinterpret_cast<double*>(ss.get()), gg.f(), P, reinterpret_cast<double*>(scr.get()), nullptr);
    });
    mem_line("device memcpy 2 GB (read+write)", 2.0 * 4 * P, [&] {
      cudaMemcpyAsync(p.get(), gg.get(), size_t(P) * 4, cudaMemcpyDeviceToDevice);
    });
  }
}

}  // namespace

int main(int argc, char** argv) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("SKIP: no CUDA GPU visible; the GPU checks did not run\n");
    return 77;
  }
  bool want_perf = false, want_ops = true, want_model = true, want_profile = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--perf") {
      want_perf = true;
      want_ops = want_model = false;
    } else if (a == "--ops") {
      want_model = false;
    } else if (a == "--model") {
      want_ops = false;
    } else if (a == "--profile") {
      want_profile = true;
      want_ops = want_model = false;
    } else if (a == "--all") {
      want_perf = want_ops = want_model = true;
    } else {
      std::printf("usage: %s [--ops | --model | --perf | --profile | --all]\n", argv[0]);
      return 2;
    }
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  std::printf("GPU: %s (sm_%d%d, %d SMs)\n", prop.name, prop.major, prop.minor, prop.multiProcessorCount);
  void* ws = nullptr;
  check_cuda(cudaMalloc(&ws, cu::Gemm::kWorkspaceBytes), "workspace");
  float* scratch = nullptr;
  check_cuda(cudaMalloc(&scratch, size_t(64) << 20), "scratch");
  Results results;
  try {
    cu::Gemm gemm(ws, cu::Gemm::kWorkspaceBytes);
    Ctx x;
    x.gemm = &gemm;
    x.scratch = scratch;
    if (want_ops) {
      for (DType t : {DType::f32, DType::bf16}) {
        check_linear(x, t, 256, 128, 384, true);
        check_linear(x, t, 100, 64, 256, true);
        check_linear(x, t, 256, 128, 384, false);
        check_lm_head(x, t);
        check_layernorm(x, t, 300, 768);
        check_layernorm(x, t, 64, 64);
        check_attention(x, t, 2, 100, 2, 64, cu::AttentionImpl::simple);
        check_attention(x, t, 2, 64, 3, 32, cu::AttentionImpl::simple);
        if (t != DType::f32) {
          check_attention(x, t, 2, 64, 2, 64, cu::AttentionImpl::flash);
          check_attention(x, t, 2, 100, 2, 64, cu::AttentionImpl::flash);
          check_attention(x, t, 1, 256, 3, 64, cu::AttentionImpl::flash);
          check_attention(x, t, 1, 200, 1, 64, cu::AttentionImpl::flash);
          check_attention(x, t, 1, 512, 2, 64, cu::AttentionImpl::flash);
          check_attention(x, t, 2, 300, 1, 64, cu::AttentionImpl::flash);
          check_attention(x, t, 2, 300, 1, 64, cu::AttentionImpl::flash_narrow);
          check_attention(x, t, 1, 128, 2, 64, cu::AttentionImpl::flash_narrow);
          check_attention(x, t, 2, 300, 1, 64, cu::AttentionImpl::flash_occ3);
          check_attention(x, t, 2, 300, 1, 64, cu::AttentionImpl::flash_two_barrier);
          check_attention(x, t, 1, 64, 2, 64, cu::AttentionImpl::flash_two_barrier);
          if (cu::cudnn_attention_compiled()) {
            // A shape cuDNN refuses is a failure here, with cuDNN's reason.
            const int64_t shapes[][4] = {{2, 64, 2, 64}, {2, 100, 2, 64}, {1, 512, 2, 64},
                                         {2, 300, 1, 64}, {2, 128, 2, 128}};
            for (const auto& sh : shapes) {
              try {
                check_attention(x, t, sh[0], sh[1], sh[2], sh[3], cu::AttentionImpl::cudnn);
              } catch (const std::exception& e) {
                std::printf("cuDNN attention T=%lld HS=%lld: %s\n", static_cast<long long>(sh[1]),
                            static_cast<long long>(sh[3]), e.what());
                x.r.check("attention cudnn T=" + std::to_string(sh[1]) + " HS=" + std::to_string(sh[3]), false);
              }
            }
          } else {
            std::printf("  (cuDNN attention: not in this build, not checked)\n");
          }
        }
        check_softmax_xent(x, t, 64, 1000, 1024);
        check_embedding(x, t);
        check_small_ops(x, t);
        check_adamw(x, t);
      }
      check_layernorm(x, DType::bf16, 300, 768);  // the GPT-2 width, rows not a multiple of a block
      check_attention(x, DType::f16, 2, 100, 2, 64, cu::AttentionImpl::flash);
      check_linear(x, DType::f16, 256, 128, 384, true);
      check_layernorm(x, DType::f16, 128, 256);
      check_softmax_xent(x, DType::f16, 32, 1000, 1024);
    }
    results = x.r;
    if (want_model) {
      const ModelCase flash_case{"L2 C128 NH2 (HS64) V500 B2 T96", {2, 2, 128, 128, 500}, 2, 96};
      const ModelCase tiny_case{"gpt-tiny (HS32) B2 T64", {2, 2, 64, 64, 256}, 2, 64};
      for (DType t : {DType::f32, DType::bf16}) {
        check_model(results, flash_case, t, false);
        check_model(results, tiny_case, t, false);
      }
      check_model(results, flash_case, DType::bf16, true);
      check_model(results, flash_case, DType::f16, false);
      check_model_properties(results, flash_case, DType::bf16);
      check_model_properties(results, flash_case, DType::f32);
    }
    if (want_profile) profile_once(scratch);
    if (want_perf) {
      perf(gemm, scratch, 16, 1024, 768, 12);
      std::printf("\nGEMMs again with autotuning (fastest of cuBLASLt's candidates):\n");
      cu::Gemm tuned(ws, cu::Gemm::kWorkspaceBytes);
      tuned.set_autotune(true);
      perf(tuned, scratch, 16, 1024, 768, 12, true);
      std::printf("\nGPT-2 350M shapes (C=1024, NH=16, B=8):\n");
      perf(tuned, scratch, 8, 1024, 1024, 16);
    }
  } catch (const std::exception& e) {
    std::printf("ERROR: %s\n", e.what());
    results.failed++;
  }
  cudaFree(ws);
  cudaFree(scratch);
  std::printf("\nGPU checks: %d passed, %d failed\n", results.passed, results.failed);
  return results.failed == 0 ? 0 : 1;
}
