// test_ops CUDA composite case: the CUDA GPT model against the CPU GPT model (reference
// ops) on the same parameters and tokens: logits, loss, every gradient, three AdamW steps;
// then properties of the CUDA model alone (gradient multiplier, accumulation, recompute).
// Not an op of the vocabulary: it checks the ops composed as training runs them.
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "aiscale/nn/models/gpt.h"
#include "cuda_harness.h"

namespace aiscale::ops::testing {
namespace {

struct ModelCase {
  const char* name;
  nn::GptConfig config;
  int64_t B, T;
};

void check_model(Recorder& r, const ModelCase& mc, DType t, bool recompute) {
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
    r.record(tag + " logits (no targets)", t, dev::rel_err(b, a), loss_tol * 3);
  }
  const float lc = cpu->forward(in.data(), tg.data());
  const float lg = gpu->forward(in.data(), tg.data());
  std::printf("  %s: loss cpu %.6f gpu %.6f\n", tag.c_str(), lc, lg);
  r.record(tag + " loss", t, std::fabs(lg - lc) / std::fabs(lc), loss_tol);
  {
    std::vector<float> a(c.vocab_size), b(c.vocab_size);
    cpu->logits_at(0, 3, a.data());
    gpu->logits_at(0, 3, b.data());  // recomputed from ln_f (logits hold dlogits now)
    r.record(tag + " logits (after fused loss)", t, dev::rel_err(b, a), loss_tol * 3);
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
    const double e = dev::rel_err(a, b);
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
    r.record(tag + " params after 3 steps", t, dev::rel_err(pg, pc), t == DType::f32 ? 1e-4 : 1e-2);
  }
}

// Properties of the CUDA model alone: grad_multiplier scaling, gradient accumulation,
// recompute (LayerNorm/GELU outputs, whole layers) giving identical results, determinism
// of two runs.
void check_model_properties(Recorder& r, const ModelCase& mc, DType t) {
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
  r.record("model grad_multiplier 4 = 4 x grads", t, dev::rel_err(g2, g1), t == DType::f32 ? 1e-5 : 2e-2);
  a->zero_grad();
  a->forward(in.data(), tg.data());
  a->backward(4.0f);
  a->forward(in.data(), tg.data());
  a->backward(4.0f);  // accumulates
  a->get_grads(g3.data());
  for (auto& v : g1) v *= 2.0f;
  r.record("model gradient accumulation (2 micro-steps)", t, dev::rel_err(g3, g1), t == DType::f32 ? 1e-5 : 2e-2);
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
  r.record("model recompute: same grads", t, dev::rel_err(gb, ga), t == DType::f32 ? 1e-6 : 5e-3);
  // Whole layers recomputed: the same forward again, so the same loss and gradients (up
  // to dQ's atomics), in less memory.
  std::vector<float> gf(P);
  full->zero_grad();
  const float lf = full->forward(in.data(), tg.data());
  full->backward(1.0f);
  full->get_grads(gf.data());
  r.check("model recompute layers: same loss", la == lf);
  r.record("model recompute layers: same grads", t, dev::rel_err(gf, ga), t == DType::f32 ? 1e-6 : 5e-3);
  r.check("model recompute layers: less memory", full->memory_bytes() < b->memory_bytes());
  std::printf("  memory: %.1f MiB without recompute, %.1f MiB with, %.1f MiB recomputing layers\n",
              double(a->memory_bytes()) / 1048576.0, double(b->memory_bytes()) / 1048576.0,
              double(full->memory_bytes()) / 1048576.0);
}

const ModelCase kFlashCase{"L2 C128 NH2 (HS64) V500 B2 T96", {2, 2, 128, 128, 500}, 2, 96};
const ModelCase kTinyCase{"gpt-tiny (HS32) B2 T64", {2, 2, 64, 64, 256}, 2, 64};

}  // namespace

CudaFamily cuda_model_family() {
  CudaFamily f;
  f.name = "gpt_model";
  f.dtypes = {DType::f32, DType::bf16, DType::f16};
  f.tolerance_note = "composite: fp32 loss 1e-5, grads 1e-3; bf16 loss 1e-2, grads 6e-2";
  f.run = [](CudaContext& x, DType t) {
    check_model(x.r, kFlashCase, t, false);
    if (t == DType::f16) return;
    check_model(x.r, kTinyCase, t, false);
    if (t == DType::bf16) check_model(x.r, kFlashCase, t, true);
    check_model_properties(x.r, kFlashCase, t);
  };
  return f;
}

}  // namespace aiscale::ops::testing
