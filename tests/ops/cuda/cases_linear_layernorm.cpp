// test_ops CUDA cases: the linear layers (cuBLASLt GEMMs with their fused epilogues and
// the plain-kernel fallbacks) and LayerNorm, against the host reference.
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "aiscale/ops/cuda/cudnn_attention.h"
#include "aiscale/ops/ops.h"
#include "cuda_harness.h"

namespace aiscale::ops::testing {
namespace {

namespace cu = aiscale::cuda;
void check_linear(CudaContext& x, DType t, int64_t N, int64_t C, int64_t OC, bool fused) {
  const auto& ref = ops::reference_backend();
  const std::string tag = std::string(fused ? "" : " unfused") + " N=" + std::to_string(N) +
                          " C=" + std::to_string(C) + " OC=" + std::to_string(OC);
  cu::LinearOptions lo;
  lo.fused_gelu = lo.fused_dgelu = lo.fused_bgrad = fused;
  auto inp = dev::randn(N * C, x.rng), w = dev::randn(OC * C, x.rng, 0.05f), b = dev::randn(OC, x.rng, 0.1f);
  auto res = dev::randn(N * OC, x.rng);
  dev::round_all(t, inp);
  dev::round_all(t, w);
  dev::round_all(t, b);
  dev::round_all(t, res);
  dev::Buffer d_inp(t, N * C), d_w(t, OC * C), d_b(t, OC), d_res(t, N * OC), d_out(t, N * OC),
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
  x.r.record("linear_forward bias" + tag, t, dev::rel_err(d_out.download(), ref_out), tol_for(t));
  // + residual
  {
    std::vector<float> expect(N * OC);
    for (int64_t i = 0; i < N * OC; ++i) expect[i] = ref_out[i] + res[i];
    d_out.poison();
    cu::linear_forward(*x.gemm, t, d_out.get(), nullptr, d_inp.get(), d_w.get(), d_b.get(),
                       d_res.get(), N, C, OC, lo, nullptr);
    x.r.record("linear_forward bias+residual" + tag, t, dev::rel_err(d_out.download(), expect), tol_for(t));
  }
  // GELU
  {
    std::vector<float> pre = ref_out, gel(N * OC);
    dev::round_all(t, pre);
    ref.gelu_forward(gel.data(), pre.data(), N * OC);
    d_out.poison();
    cu::linear_forward(*x.gemm, t, d_out.get(), d_pre.get(), d_inp.get(), d_w.get(), d_b.get(),
                       nullptr, N, C, OC, lo, nullptr);
    x.r.record("linear_forward gelu (pre)" + tag, t, dev::rel_err(d_pre.download(), ref_out), tol_for(t));
    x.r.record("linear_forward gelu (out)" + tag, t, dev::rel_err(d_out.download(), gel), tol_for(t));
  }
  // backward: dinp, dweight, dbias
  {
    auto dout = dev::randn(N * OC, x.rng);
    dev::round_all(t, dout);
    auto dw0 = dev::randn(OC * C, x.rng);  // gradients accumulate onto these
    std::vector<float> dinp(N * C), dw = dw0, db(OC, 0.0f);
    ref.matmul_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), N, C, OC);
    dev::Buffer d_dout(t, N * OC), d_dinp(t, N * C), d_dw(DType::f32, OC * C), d_db(DType::f32, OC);
    d_dout.upload(dout);
    d_dw.upload(dw0);
    cu::linear_backward_input(*x.gemm, t, d_dinp.get(), d_dout.get(), d_w.get(), N, C, OC, OC,
                              1.0f, nullptr, nullptr, x.scratch, lo, nullptr);
    x.r.record("linear_backward dinp" + tag, t, dev::rel_err(d_dinp.download(), dinp), tol_for(t));
    cu::linear_backward_weight(*x.gemm, t, d_dw.f(), d_db.f(), d_dout.get(), d_inp.get(), N, C, OC,
                               OC, 1.0f, x.scratch, lo, nullptr);
    std::vector<float> got = d_dw.download(), dw_inc(OC * C), got_inc(OC * C);
    for (int64_t i = 0; i < OC * C; ++i) {
      dw_inc[i] = dw[i] - dw0[i];
      got_inc[i] = got[i] - dw0[i];
    }
    x.r.record("linear_backward dweight (+=)" + tag, t, dev::rel_err(got_inc, dw_inc), tol_for(t, 1e-5));
    x.r.record("linear_backward dbias" + tag, t, dev::rel_err(d_db.download(), db), tol_for(t, 1e-5));
    // with GELU: dinp = gelu'(pre) * (dout @ W), its column sums = the bias gradient
    auto pre = dev::randn(N * C, x.rng);
    dev::round_all(t, pre);
    std::vector<float> dg(N * C), dbg(C, 0.0f);
    ref.gelu_backward(dg.data(), pre.data(), dinp.data(), N * C);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < C; ++c) dbg[c] += dg[n * C + c];
    dev::Buffer d_pre2(t, N * C), d_dbg(DType::f32, C);
    d_pre2.upload(pre);
    d_dinp.poison();
    cu::linear_backward_input(*x.gemm, t, d_dinp.get(), d_dout.get(), d_w.get(), N, C, OC, OC,
                              1.0f, d_pre2.get(), d_dbg.f(), x.scratch, lo, nullptr);
    x.r.record("linear_backward dgelu" + tag, t, dev::rel_err(d_dinp.download(), dg), tol_for(t));
    x.r.record("linear_backward dgelu bias" + tag, t, dev::rel_err(d_dbg.download(), dbg), tol_for(t));
  }
}

// The tied LM head: only the first OC of ld columns of dout, with alpha.
void check_lm_head(CudaContext& x, DType t) {
  const auto& ref = ops::reference_backend();
  const int64_t N = 96, C = 64, V = 500, Vp = 512;
  const float alpha = 0.5f;
  auto lnf = dev::randn(N * C, x.rng), dlog = dev::randn(N * Vp, x.rng), w = dev::randn(Vp * C, x.rng, 0.05f);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t v = V; v < Vp; ++v) dlog[n * Vp + v] = 0.0f;
  for (int64_t v = V; v < Vp; ++v)
    for (int64_t c = 0; c < C; ++c) w[v * C + c] = 0.0f;
  dev::round_all(t, lnf);
  dev::round_all(t, dlog);
  dev::round_all(t, w);
  std::vector<float> dlog_packed(N * V);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t v = 0; v < V; ++v) dlog_packed[n * V + v] = alpha * dlog[n * Vp + v];
  std::vector<float> dinp(N * C), dw(V * C, 0.0f);
  ref.matmul_backward(dinp.data(), dw.data(), nullptr, dlog_packed.data(), lnf.data(), w.data(), N,
                      C, V);
  dev::Buffer d_lnf(t, N * C), d_dlog(t, N * Vp), d_w(t, Vp * C), d_dinp(t, N * C), d_dw(DType::f32, V * C);
  d_lnf.upload(lnf);
  d_dlog.upload(dlog);
  d_w.upload(w);
  d_dw.zero();
  cu::LinearOptions lo;
  cu::linear_backward_input(*x.gemm, t, d_dinp.get(), d_dlog.get(), d_w.get(), N, C, Vp, Vp, alpha,
                            nullptr, nullptr, x.scratch, lo, nullptr);
  cu::linear_backward_weight(*x.gemm, t, d_dw.f(), nullptr, d_dlog.get(), d_lnf.get(), N, C, V, Vp,
                             alpha, x.scratch, lo, nullptr);
  x.r.record("lm_head dlnf (padded vocab, alpha)", t, dev::rel_err(d_dinp.download(), dinp), tol_for(t));
  x.r.record("lm_head dwte (ld > OC, alpha)", t, dev::rel_err(d_dw.download(), dw), tol_for(t, 1e-5));
}

// --------------------------------------------------------------------------------------

void check_layernorm(CudaContext& x, DType t, int64_t N, int64_t C) {
  const auto& ref = ops::reference_backend();
  const std::string tag = " N=" + std::to_string(N) + " C=" + std::to_string(C);
  auto inp = dev::randn(N * C, x.rng, 2.0f), w = dev::randn(C, x.rng), b = dev::randn(C, x.rng);
  for (int64_t i = 0; i < N * C; ++i) inp[i] += 0.5f;
  dev::round_all(t, inp);
  dev::round_all(t, w);
  dev::round_all(t, b);
  std::vector<float> out(N * C), mean(N), rstd(N);
  ref.layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C);
  dev::Buffer d_inp(t, N * C), d_w(t, C), d_b(t, C), d_out(t, N * C), d_mean(DType::f32, N),
      d_rstd(DType::f32, N);
  d_inp.upload(inp);
  d_w.upload(w);
  d_b.upload(b);
  cu::layernorm_forward(t, d_out.get(), d_mean.f(), d_rstd.f(), d_inp.get(), d_w.get(), d_b.get(), N,
                        C, nullptr);
  x.r.record("layernorm_forward out" + tag, t, dev::rel_err(d_out.download(), out), tol_for(t));
  x.r.record("layernorm_forward mean" + tag, t, dev::rel_err(d_mean.download(), mean), 1e-5);
  x.r.record("layernorm_forward rstd" + tag, t, dev::rel_err(d_rstd.download(), rstd), 1e-5);

  auto dout = dev::randn(N * C, x.rng), dinp0 = dev::randn(N * C, x.rng);
  dev::round_all(t, dout);
  dev::round_all(t, dinp0);
  auto dw0 = dev::randn(C, x.rng), db0 = dev::randn(C, x.rng), cs0 = dev::randn(C, x.rng);
  std::vector<float> dinp = dinp0, dw = dw0, db = db0;
  ref.layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(),
                         mean.data(), rstd.data(), N, C);
  std::vector<float> cs = cs0;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) cs[c] += dev::round_to(t, dinp[n * C + c]);
  dev::Buffer d_dout(t, N * C), d_dinp(t, N * C), d_dw(DType::f32, C), d_db(DType::f32, C),
      d_cs(DType::f32, C);
  d_dout.upload(dout);
  d_dinp.upload(dinp0);
  d_dw.upload(dw0);
  d_db.upload(db0);
  d_cs.upload(cs0);
  // Use the device's own mean / rstd (as the model does).
  cu::layernorm_backward(t, d_dinp.get(), d_dw.f(), d_db.f(), d_cs.f(), d_dout.get(), d_inp.get(),
                         d_w.get(), d_mean.f(), d_rstd.f(), N, C, true, x.scratch, nullptr);
  x.r.record("layernorm_backward dinp (+=)" + tag, t, dev::rel_err(d_dinp.download(), dinp), tol_for(t));
  auto inc = [](std::vector<float> a, const std::vector<float>& a0) {
    for (size_t i = 0; i < a.size(); ++i) a[i] -= a0[i];
    return a;
  };
  x.r.record("layernorm_backward dweight" + tag, t, dev::rel_err(inc(d_dw.download(), dw0), inc(dw, dw0)), tol_for(t, 1e-4));
  x.r.record("layernorm_backward dbias" + tag, t, dev::rel_err(inc(d_db.download(), db0), inc(db, db0)), tol_for(t, 1e-4));
  x.r.record("layernorm_backward dinp colsum" + tag, t, dev::rel_err(inc(d_cs.download(), cs0), inc(cs, cs0)), tol_for(t, 1e-4));
  // overwrite mode
  d_dinp.poison();
  std::vector<float> dinp_ow(N * C, 0.0f), dwx(C, 0.0f), dbx(C, 0.0f);
  ref.layernorm_backward(dinp_ow.data(), dwx.data(), dbx.data(), dout.data(), inp.data(), w.data(),
                         mean.data(), rstd.data(), N, C);
  cu::layernorm_backward(t, d_dinp.get(), d_dw.f(), d_db.f(), nullptr, d_dout.get(), d_inp.get(),
                         d_w.get(), d_mean.f(), d_rstd.f(), N, C, false, x.scratch, nullptr);
  x.r.record("layernorm_backward dinp (=)" + tag, t, dev::rel_err(d_dinp.download(), dinp_ow), tol_for(t));
}

}  // namespace

CudaFamily cuda_matmul_family() {
  CudaFamily f;
  f.name = "matmul";
  f.ops = {Op::matmul_forward, Op::matmul_backward};
  f.dtypes = {DType::f32, DType::bf16, DType::f16};
  f.tolerance_note = "fused epilogues (bias, +residual, GELU+aux, dGELU+bias grad) and unfused";
  f.run = [](CudaContext& x, DType t) {
    check_linear(x, t, 256, 128, 384, true);
    if (t == DType::f16) return;
    check_linear(x, t, 100, 64, 256, true);
    check_linear(x, t, 256, 128, 384, false);
    check_lm_head(x, t);
  };
  return f;
}

CudaFamily cuda_layernorm_family() {
  CudaFamily f;
  f.name = "layernorm";
  f.ops = {Op::layernorm_forward, Op::layernorm_backward};
  f.dtypes = {DType::f32, DType::bf16, DType::f16};
  f.tolerance_note = "mean, rstd 1e-5; dweight, dbias, column sums 1e-4 in fp32";
  f.run = [](CudaContext& x, DType t) {
    if (t == DType::f16) {
      check_layernorm(x, t, 128, 256);
      return;
    }
    check_layernorm(x, t, 300, 768);
    check_layernorm(x, t, 64, 64);
    // The GPT-2 width again on fresh inputs, rows not a multiple of a block.
    if (t == DType::bf16) check_layernorm(x, t, 300, 768);
  };
  return f;
}

}  // namespace aiscale::ops::testing
