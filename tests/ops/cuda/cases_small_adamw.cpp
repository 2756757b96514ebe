// test_ops CUDA cases: the elementwise ops, the bias gradient, the fused and small ops
// of the CUDA backend, and AdamW with the gradient norm's sum of squares.
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
void check_small_ops(CudaContext& x, DType t) {
  const auto& ref = ops::reference_backend();
  const int64_t n = 4096 + 64;
  auto a = dev::randn(n, x.rng, 2.0f), b = dev::randn(n, x.rng);
  dev::round_all(t, a);
  dev::round_all(t, b);
  std::vector<float> g(n), dg(n);
  ref.gelu_forward(g.data(), a.data(), n);
  ref.gelu_backward(dg.data(), a.data(), b.data(), n);
  dev::Buffer d_a(t, n), d_b(t, n), d_o(t, n);
  d_a.upload(a);
  d_b.upload(b);
  cu::gelu_forward(t, d_o.get(), d_a.get(), n, nullptr);
  x.r.record("gelu_forward", t, dev::rel_err(d_o.download(), g), tol_for(t));
  cu::gelu_backward(t, d_o.get(), d_a.get(), d_b.get(), n, nullptr);
  x.r.record("gelu_backward", t, dev::rel_err(d_o.download(), dg), tol_for(t));
  std::vector<float> s(n);
  ref.residual_forward(s.data(), a.data(), b.data(), n);
  cu::residual_forward(t, d_o.get(), d_a.get(), d_b.get(), n, nullptr);
  x.r.record("residual_forward", t, dev::rel_err(d_o.download(), s), tol_for(t));
  // bias_grad (column sums)
  const int64_t N = 333, OC = 264;
  auto m = dev::randn(N * OC, x.rng);
  dev::round_all(t, m);
  std::vector<float> cs(OC, 0.0f);
  for (int64_t r = 0; r < N; ++r)
    for (int64_t c = 0; c < OC; ++c) cs[c] += m[r * OC + c];
  dev::Buffer d_m(t, N * OC), d_cs(DType::f32, OC);
  d_m.upload(m);
  cu::bias_grad(t, d_cs.f(), d_m.get(), N, OC, false, x.scratch, nullptr);
  x.r.record("bias_grad (column sums)", t, dev::rel_err(d_cs.download(), cs), 1e-5);
}

// The fused dGELU + bias gradient kernel, the fp32 accumulation, the dtype casts and the
// single-row logits (sampling), which have no host-table counterpart: checked against
// host loops over the reference's ops.
void check_fused_small(CudaContext& x, DType t) {
  const auto& ref = ops::reference_backend();
  {
    const int64_t N = 333, OC = 264;
    auto d = dev::randn(N * OC, x.rng), pre = dev::randn(N * OC, x.rng, 2.0f);
    dev::round_all(t, d);
    dev::round_all(t, pre);
    std::vector<float> want(N * OC), colsum(OC, 0.0f);
    ref.gelu_backward(want.data(), pre.data(), d.data(), N * OC);
    for (int64_t r = 0; r < N; ++r)
      for (int64_t c = 0; c < OC; ++c) colsum[c] += want[r * OC + c];
    dev::Buffer d_d(t, N * OC), d_pre(t, N * OC), d_bias(DType::f32, OC);
    d_d.upload(d);
    d_pre.upload(pre);
    cu::gelu_backward_bias(t, d_d.get(), d_pre.get(), N, OC, d_bias.f(), x.scratch, nullptr);
    x.r.record("gelu_backward_bias d (in place)", t, dev::rel_err(d_d.download(), want), tol_for(t));
    x.r.record("gelu_backward_bias dbias (column sums)", t, dev::rel_err(d_bias.download(), colsum),
               tol_for(t, 1e-5));
  }
  const int64_t n = 4096 + 64;
  if (t == DType::f32) {
    auto a = dev::randn(n, x.rng), b = dev::randn(n, x.rng);
    std::vector<float> sum(n);
    for (int64_t i = 0; i < n; ++i) sum[i] = a[i] + b[i];
    dev::Buffer d_a(DType::f32, n), d_b(DType::f32, n);
    d_a.upload(a);
    d_b.upload(b);
    cu::add_inplace(d_a.f(), d_b.f(), n, nullptr);
    x.r.record("add_inplace (exact)", t, dev::rel_err(d_a.download(), sum), 0.0);
  }
  {
    // fp32 -> t rounds to nearest even, as the host conversion does; t -> fp32 is exact.
    auto v = dev::randn(n, x.rng, 3.0f);
    std::vector<float> rounded = v;
    dev::round_all(t, rounded);
    dev::Buffer d_in(DType::f32, n), d_t(t, n), d_back(DType::f32, n);
    d_in.upload(v);
    cu::cast_from_f32(t, d_t.get(), d_in.f(), n, nullptr);
    x.r.record("cast fp32 -> dtype (exact rounding)", t, dev::rel_err(d_t.download(), rounded), 0.0);
    cu::cast_to_f32(t, d_back.f(), d_t.get(), n, nullptr);
    x.r.record("cast dtype -> fp32 (exact)", t, dev::rel_err(d_back.download(), rounded), 0.0);
  }
  {
    const int64_t V = 500, C = 64;
    auto xr = dev::randn(C, x.rng), w = dev::randn(V * C, x.rng, 0.1f);
    dev::round_all(t, xr);
    dev::round_all(t, w);
    std::vector<float> want(V);
    ref.matmul_forward(want.data(), xr.data(), w.data(), nullptr, 1, C, V);
    dev::round_all(t, want);
    dev::Buffer d_x(t, C), d_w(t, V * C), d_out(DType::f32, V);
    d_x.upload(xr);
    d_w.upload(w);
    cu::logits_row(t, d_out.f(), d_x.get(), d_w.get(), V, C, nullptr);
    x.r.record("logits_row V=500 C=64", t, dev::rel_err(d_out.download(), want), tol_for(t));
  }
}

void check_adamw(CudaContext& x, DType t) {
  const auto& ref = ops::reference_backend();
  const int64_t n = 10000 + 3;  // not a multiple of 4: exercises the tail
  auto p = dev::randn(n, x.rng), gr = dev::randn(n, x.rng, 0.1f), m = dev::randn(n, x.rng, 0.01f), v = dev::randn(n, x.rng, 0.01f);
  for (auto& e : v) e = e * e;
  ops::AdamWParams hp;
  hp.lr = 1e-3f;
  hp.weight_decay = 0.1f;
  hp.step = 3;
  hp.grad_scale = 0.7f;
  std::vector<float> rp = p, rm = m, rv = v;
  ref.adamw_update(rp.data(), gr.data(), rm.data(), rv.data(), n, hp);
  dev::Buffer d_p(DType::f32, n), d_g(DType::f32, n), d_m(DType::f32, n), d_v(DType::f32, n), d_w(t, n);
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
  x.r.record("adamw params", t, dev::rel_err(d_p.download(), rp), 1e-6);
  x.r.record("adamw m", t, dev::rel_err(d_m.download(), rm), 1e-6);
  x.r.record("adamw v", t, dev::rel_err(d_v.download(), rv), 1e-6);
  auto rw = rp;
  dev::round_all(t, rw);
  x.r.record("adamw working copy", t, dev::rel_err(d_w.download(), rw), 1e-6);
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
    dev::Buffer s_p(DType::f32, int64_t(sp.size())), s_m(DType::f32, int64_t(sp.size())),
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
    x.r.record("adamw shard params", t, dev::rel_err(got_p, want_p), 1e-6);
    x.r.record("adamw shard working copy (zero outside)", t, dev::rel_err(gw, want_w), 1e-6);
    x.r.record("adamw shard leaves state outside", DType::f32, std::fabs(gp[0]) + std::fabs(gp[size_t(off + k)]), 0.0);
  }
  // sum of squares
  dev::Buffer d_ss(DType::f32, 2), d_scr(DType::f32, 2 * cu::sum_squares_scratch_doubles());
  cu::sum_squares(reinterpret_cast<double*>(d_ss.get()), d_g.f(), n,
                  reinterpret_cast<double*>(d_scr.get()), nullptr);
  double got = 0.0;
  dev::check_cuda(cudaDeviceSynchronize(), "sum_squares");
  dev::check_cuda(cudaMemcpy(&got, d_ss.get(), 8, cudaMemcpyDeviceToHost), "D2H");
  const double want = ops::sum_squares(gr.data(), n);
  x.r.record("sum_squares", DType::f32, std::fabs(got - want) / want, 1e-6);
}

}  // namespace

CudaFamily cuda_elementwise_family() {
  CudaFamily f;
  f.name = "elementwise";
  f.ops = {Op::gelu_forward, Op::gelu_backward, Op::residual_forward, Op::bias_grad};
  f.dtypes = {DType::f32, DType::bf16};
  f.tolerance_note = "bias_grad 1e-5 (fp32 sums)";
  f.run = [](CudaContext& x, DType t) { check_small_ops(x, t); };
  return f;
}

CudaFamily cuda_fused_small_family() {
  CudaFamily f;
  f.name = "fused_small";
  f.ops = {Op::gelu_backward_bias, Op::add_inplace, Op::cast, Op::logits_row};
  f.dtypes = {DType::f32, DType::bf16, DType::f16};
  f.tolerance_note = "add_inplace and casts exact";
  f.run = [](CudaContext& x, DType t) { check_fused_small(x, t); };
  return f;
}

CudaFamily cuda_adamw_family() {
  CudaFamily f;
  f.name = "adamw";
  f.ops = {Op::adamw_update, Op::sum_squares};
  f.dtypes = {DType::f32, DType::bf16};
  f.tolerance_note = "1e-6; a ZeRO-1 shard leaves everything outside it untouched";
  f.run = [](CudaContext& x, DType t) { check_adamw(x, t); };
  return f;
}

}  // namespace aiscale::ops::testing
