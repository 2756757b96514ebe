// test_ops CUDA cases: attention (simple, flash and cuDNN kernels), the fused softmax
// cross-entropy with the loss mean, and the embedding (deterministic backward).
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
void check_attention(CudaContext& x, DType t, int64_t B, int64_t T, int64_t NH, int64_t HS,
                     cu::AttentionImpl impl) {
  const auto& ref = ops::reference_backend();
  const int64_t C = NH * HS;
  const std::string tag = std::string(" ") + cu::attention_impl_name(impl) + " B=" +
                          std::to_string(B) + " T=" + std::to_string(T) + " NH=" +
                          std::to_string(NH) + " HS=" + std::to_string(HS);
  // cuDNN's fused engines: a stateful object with its own plans and workspace.
  std::unique_ptr<cu::CudnnAttention> cudnn;
  dev::Buffer d_ws(DType::f32, 4);
  if (impl == cu::AttentionImpl::cudnn) {
    cudnn = std::make_unique<cu::CudnnAttention>(t, B, T, NH, HS);
    d_ws = dev::Buffer(DType::f32, int64_t(cudnn->workspace_bytes() / 4 + 4));
  }
  auto qkv = dev::randn(B * T * 3 * C, x.rng);
  dev::round_all(t, qkv);
  std::vector<float> out(B * T * C), att(B * NH * T * T);
  ref.attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
  dev::Buffer d_qkv(t, B * T * 3 * C), d_out(t, B * T * C), d_lse(DType::f32, B * NH * T);
  d_qkv.upload(qkv);
  if (cudnn)
    cudnn->forward(d_out.get(), d_lse.f(), d_qkv.get(), d_ws.get(), nullptr);
  else
    cu::attention_forward(t, d_out.get(), d_lse.f(), d_qkv.get(), B, T, C, NH, impl, nullptr);
  const double tol = tol_for(t, 1e-4);
  x.r.record("attention_forward" + tag, t, dev::rel_err(d_out.download(), out), tol);

  auto dout = dev::randn(B * T * C, x.rng);
  dev::round_all(t, dout);
  std::vector<float> dqkv(B * T * 3 * C), datt(B * NH * T * T);
  // The reference differentiates through its own out; the device uses its rounded out
  // (as training does). Feed the reference the same att.
  ref.attention_backward(dqkv.data(), datt.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH);
  dev::Buffer d_dout(t, B * T * C), d_dqkv(t, B * T * 3 * C), d_dq(DType::f32, B * T * C),
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
    x.r.record("attention_backward" + std::string(names[part]) + tag, t, dev::rel_err(a, b), tol);
  }
}

void check_softmax_xent(CudaContext& x, DType t, int64_t N, int64_t V, int64_t Vp) {
  const auto& ref = ops::reference_backend();
  const std::string tag = " N=" + std::to_string(N) + " V=" + std::to_string(V);
  auto logits = dev::randn(N * V, x.rng, 3.0f);
  dev::round_all(t, logits);
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
  dev::Buffer d_logits(t, N * Vp), d_losses(DType::f32, N), d_targets(DType::f32, N),
      d_mean(DType::f32, 1);
  d_logits.upload(padded);
  d_targets.upload_raw(targets.data(), N * 4);
  cu::softmax_xent(t, d_losses.f(), d_logits.get(), static_cast<const int32_t*>(d_targets.get()), N,
                   V, Vp, 0.25f / N, true, nullptr);
  x.r.record("softmax_xent losses" + tag, t, dev::rel_err(d_losses.download(), losses), tol_for(t, 1e-5));
  x.r.record("softmax_xent dlogits (in place)" + tag, t, dev::rel_err(d_logits.download(), dl_padded),
             tol_for(t, 1e-5));
  cu::mean_reduce(d_mean.f(), d_losses.f(), N, nullptr);
  double m = 0.0;
  for (float l : losses) m += l;
  m /= double(N);
  x.r.record("mean_reduce" + tag, t, dev::rel_err(d_mean.download(), {float(m)}), tol_for(t, 1e-5));
}

void check_embedding(CudaContext& x, DType t) {
  const auto& ref = ops::reference_backend();
  const int64_t B = 3, T = 50, C = 64, V = 40, maxT = 64;
  auto wte = dev::randn(V * C, x.rng), wpe = dev::randn(maxT * C, x.rng);
  dev::round_all(t, wte);
  dev::round_all(t, wpe);
  std::vector<int32_t> tokens(B * T);
  std::uniform_int_distribution<int32_t> tok(0, int32_t(V - 1));
  for (auto& v : tokens) v = tok(x.rng);
  tokens[7] = tokens[9] = tokens[100] = 3;  // repeats
  std::vector<float> out(B * T * C);
  ref.embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
  dev::Buffer d_wte(t, V * C), d_wpe(t, maxT * C), d_out(t, B * T * C), d_tok(DType::f32, B * T);
  d_wte.upload(wte);
  d_wpe.upload(wpe);
  d_tok.upload_raw(tokens.data(), B * T * 4);
  cu::embedding_forward(t, d_out.get(), static_cast<const int32_t*>(d_tok.get()), d_wte.get(),
                        d_wpe.get(), B, T, C, nullptr);
  x.r.record("embedding_forward", t, dev::rel_err(d_out.download(), out), tol_for(t));

  auto dout = dev::randn(B * T * C, x.rng);
  dev::round_all(t, dout);
  auto dwte0 = dev::randn(V * C, x.rng), dwpe0 = dev::randn(maxT * C, x.rng);
  std::vector<float> dwte = dwte0, dwpe = dwpe0;
  ref.embedding_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C);
  const int64_t N = B * T;
  std::vector<int32_t> buckets(3 * N + 1), counts;
  const int64_t nu = cu::build_token_buckets(tokens.data(), N, V, buckets.data(),
                                             buckets.data() + N, buckets.data() + 2 * N + 1, counts);
  dev::Buffer d_dout(t, N * C), d_dwte(DType::f32, V * C), d_dwpe(DType::f32, maxT * C),
      d_b(DType::f32, 3 * N + 1);
  d_dout.upload(dout);
  d_dwte.upload(dwte0);
  d_dwpe.upload(dwpe0);
  d_b.upload_raw(buckets.data(), buckets.size() * 4);
  const int32_t* bp = static_cast<const int32_t*>(d_b.get());
  cu::embedding_backward(t, d_dwte.f(), d_dwpe.f(), d_dout.get(), bp, bp + N, bp + 2 * N + 1, nu, B,
                         T, C, nullptr);
  x.r.record("embedding_backward dwte", t, dev::rel_err(d_dwte.download(), dwte), 1e-6);
  x.r.record("embedding_backward dwpe", t, dev::rel_err(d_dwpe.download(), dwpe), 1e-6);
}

}  // namespace

CudaFamily cuda_attention_family() {
  CudaFamily f;
  f.name = "attention";
  f.ops = {Op::attention_forward, Op::attention_backward};
  f.dtypes = {DType::f32, DType::bf16, DType::f16};
  f.tolerance_note = "fp32 1e-4; kernels simple, flash, cudnn (a shape cuDNN refuses fails)";
  f.run = [](CudaContext& x, DType t) {
    using cu::AttentionImpl;
    if (t == DType::f16) {
      check_attention(x, t, 2, 100, 2, 64, AttentionImpl::flash);
      return;
    }
    check_attention(x, t, 2, 100, 2, 64, AttentionImpl::simple);
    check_attention(x, t, 2, 64, 3, 32, AttentionImpl::simple);
    if (t == DType::f32) return;
    const int64_t flash_shapes[][3] = {{2, 64, 2},  {2, 100, 2}, {1, 256, 3},
                                       {1, 200, 1}, {1, 512, 2}, {2, 300, 1}};
    for (const auto& s : flash_shapes) check_attention(x, t, s[0], s[1], s[2], 64, AttentionImpl::flash);
    if (!cu::cudnn_attention_compiled()) {
      std::printf("  (cuDNN attention: not in this build, not checked)\n");
      return;
    }
    const int64_t cudnn_shapes[][4] = {
        {2, 64, 2, 64}, {2, 100, 2, 64}, {1, 512, 2, 64}, {2, 300, 1, 64}, {2, 128, 2, 128}};
    for (const auto& s : cudnn_shapes) {
      try {
        check_attention(x, t, s[0], s[1], s[2], s[3], AttentionImpl::cudnn);
      } catch (const std::exception& e) {
        x.r.check("attention cudnn T=" + std::to_string(s[1]) + " HS=" + std::to_string(s[3]) +
                      ": " + e.what(),
                  false);
      }
    }
  };
  return f;
}

CudaFamily cuda_softmax_xent_family() {
  CudaFamily f;
  f.name = "softmax_xent";
  f.ops = {Op::softmax_xent_forward, Op::softmax_xent_backward, Op::mean_reduce};
  f.dtypes = {DType::f32, DType::bf16, DType::f16};
  f.tolerance_note = "padded vocabulary; dlogits in place";
  f.run = [](CudaContext& x, DType t) {
    if (t == DType::f16) check_softmax_xent(x, t, 32, 1000, 1024);
    else check_softmax_xent(x, t, 64, 1000, 1024);
  };
  return f;
}

CudaFamily cuda_embedding_family() {
  CudaFamily f;
  f.name = "embedding";
  f.ops = {Op::embedding_forward, Op::embedding_backward};
  f.dtypes = {DType::f32, DType::bf16};
  f.tolerance_note = "backward 1e-6 (fp32 sums over repeated tokens)";
  f.run = [](CudaContext& x, DType t) { check_embedding(x, t); };
  return f;
}

}  // namespace aiscale::ops::testing
