// test_ops CUDA cases: FP8 (ops/cuda/fp8.cuh). The quantize kernel against the host
// reference byte for byte (both layouts, amax), the scale update against the host's, the
// three FP8 GEMMs against a double-precision product of the same quantised values, and
// Fp8Training's linear layer against the 16-bit one.
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "aiscale/nn/models/gpt.h"
#include "aiscale/ops/cuda/fp8.cuh"
#include "aiscale/ops/fp8.h"
#include "aiscale/ops/ops.h"
#include "cuda_harness.h"

namespace aiscale::ops::testing {
namespace {

namespace cu = aiscale::cuda;

struct Bytes {
  uint8_t* p = nullptr;
  size_t n = 0;
  explicit Bytes(size_t count) : n(count) {
    dev::check_cuda(cudaMalloc(&p, n + 16), "cudaMalloc");
    dev::check_cuda(cudaMemset(p, 0xA5, n), "cudaMemset");
  }
  ~Bytes() { cudaFree(p); }
  Bytes(const Bytes&) = delete;
  Bytes& operator=(const Bytes&) = delete;
  std::vector<uint8_t> download() const {
    std::vector<uint8_t> h(n);
    dev::check_cuda(cudaDeviceSynchronize(), "kernel");
    dev::check_cuda(cudaMemcpy(h.data(), p, n, cudaMemcpyDeviceToHost), "D2H");
    return h;
  }
  void upload(const std::vector<uint8_t>& h) {
    dev::check_cuda(cudaMemcpy(p, h.data(), n, cudaMemcpyHostToDevice), "H2D");
  }
};

float one_float(const float* d) {
  float h = 0;
  dev::check_cuda(cudaDeviceSynchronize(), "kernel");
  dev::check_cuda(cudaMemcpy(&h, d, 4, cudaMemcpyDeviceToHost), "D2H");
  return h;
}

int mismatches(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  int n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += a[i] != b[i];
  return n;
}

// The kernel's codes and amax against ops::fp8_quantize on the same (rounded) values.
void check_quantize(CudaContext& x, DType t, int64_t rows, int64_t cols, Fp8Format f) {
  const std::string tag = std::string(" ") + fp8_format_name(f) + " " + std::to_string(rows) +
                          "x" + std::to_string(cols);
  std::vector<float> in = dev::randn(size_t(rows * cols), x.rng, f == Fp8Format::e4m3 ? 3.0f : 1e-3f);
  // Values that saturate, that are tiny, exact ties, zeros of both signs.
  in[0] = 1e6f;
  in[1] = -1e6f;
  in[2] = 0.0f;
  in[3] = -0.0f;
  in[4] = 1e-30f;
  dev::round_all(t, in);
  const float scale = f == Fp8Format::e4m3 ? 37.5f : 4096.0f;
  dev::Buffer d_in(t, in.size()), d_scale(DType::f32, 1), d_amax(DType::f32, 1);
  d_in.upload(in);
  d_scale.upload({scale});
  d_amax.upload({0.25f});
  Bytes out(in.size()), out_t(in.size());
  cu::fp8_quantize(t, out.p, out_t.p, d_amax.f(), d_in.get(), rows, cols, d_scale.f(), f, nullptr);
  std::vector<uint8_t> want(in.size()), want_t(in.size());
  float amax = 0.25f;
  ops::fp8_quantize(want.data(), want_t.data(), &amax, in.data(), rows, cols, scale, f);
  x.r.record("fp8_quantize codes" + tag, t, double(mismatches(out.download(), want)), 0.0);
  x.r.record("fp8_quantize transposed codes" + tag, t, double(mismatches(out_t.download(), want_t)), 0.0);
  x.r.record("fp8_quantize amax" + tag, t, std::fabs(double(one_float(d_amax.f()) - amax)), 0.0);
  // One layout only; a NaN makes the amax +inf.
  in[7] = std::numeric_limits<float>::quiet_NaN();
  d_in.upload(in);
  d_amax.upload({0.0f});
  Bytes only(in.size());
  cu::fp8_quantize(t, nullptr, only.p, d_amax.f(), d_in.get(), rows, cols, d_scale.f(), f, nullptr);
  const float a = one_float(d_amax.f());
  x.r.check("fp8_quantize: NaN makes amax +inf" + tag, std::isinf(a) && a > 0);
}

// The device update against the host's over steps of amaxes (zeros, infinities included).
void check_scale_update(CudaContext& x) {
  const int64_t S = 7, H = 4;
  const int64_t K = 4;  // the device's scale stride
  std::vector<float> h_state(size_t(2 * S * K + S + S * H));
  std::vector<uint8_t> formats(S);
  for (int64_t s = 0; s < S; ++s) formats[size_t(s)] = uint8_t(s % 3 == 2 ? Fp8Format::e5m2 : Fp8Format::e4m3);
  Fp8ScalingArrays h{h_state.data(), h_state.data() + S * K, h_state.data() + 2 * S * K,
                     h_state.data() + 2 * S * K + S, formats.data(), S, H, K};
  fp8_scaling_reset(h);
  dev::Buffer d_state(DType::f32, h_state.size());
  d_state.upload(h_state);
  Bytes d_formats{size_t(S)};
  d_formats.upload(formats);
  Fp8ScalingArrays d{d_state.f(), d_state.f() + S * K, d_state.f() + 2 * S * K,
                     d_state.f() + 2 * S * K + S, d_formats.p, S, H, K};
  std::uniform_real_distribution<float> u(0.0f, 8.0f);
  int differ = 0;
  for (int step = 0; step < 11; ++step) {
    std::vector<float> amax(S);
    for (float& a : amax) a = u(x.rng);
    amax[1] = step % 3 == 0 ? 0.0f : amax[1];
    amax[4] = step == 5 ? std::numeric_limits<float>::infinity() : amax[4];
    std::copy(amax.begin(), amax.end(), h.amax);
    dev::check_cuda(cudaMemcpy(d.amax, amax.data(), size_t(S) * 4, cudaMemcpyHostToDevice), "H2D");
    fp8_scale_update(h, step % H, step > 7 ? 1 : 0);
    cu::fp8_scale_update(d, step % H, step > 7 ? 1 : 0, nullptr);
    const std::vector<float> got = d_state.download();
    for (size_t i = 0; i < got.size(); ++i) differ += got[i] != h_state[i];
  }
  x.r.record("fp8_scale_update: 11 steps, 7 slots, same bits as the host", DType::f32,
             double(differ), 0.0);
}

// Codes of values drawn at a scale, and their decoded values / scale (what the GEMM sees).
struct Quantised {
  std::vector<uint8_t> codes;
  std::vector<double> values;
};
Quantised quantise(const std::vector<float>& v, float scale, Fp8Format f) {
  Quantised q;
  q.codes.resize(v.size());
  q.values.resize(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    q.codes[i] = fp8_encode(v[i] * scale, f);
    q.values[i] = double(fp8_decode(q.codes[i], f)) / double(scale);
  }
  return q;
}
std::vector<uint8_t> transpose(const std::vector<uint8_t>& a, int64_t rows, int64_t cols) {
  std::vector<uint8_t> t(a.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) t[size_t(c * rows + r)] = a[size_t(r * cols + c)];
  return t;
}

// The three GEMMs on given codes against double products of the decoded values.
void check_gemms(CudaContext& x, DType t, int64_t N, int64_t C, int64_t OC) {
  const std::string tag = " N=" + std::to_string(N) + " C=" + std::to_string(C) + " OC=" + std::to_string(OC);
  const float sx = 40.0f, sw = 3000.0f, sg = 2e4f;
  const Quantised qx = quantise(dev::randn(size_t(N * C), x.rng), sx, Fp8Format::e4m3);
  const Quantised qw = quantise(dev::randn(size_t(OC * C), x.rng, 0.05f), sw, Fp8Format::e4m3);
  const Quantised qg = quantise(dev::randn(size_t(N * OC), x.rng, 0.01f), sg, Fp8Format::e5m2);
  std::vector<float> bias = dev::randn(size_t(OC), x.rng, 0.1f), res = dev::randn(size_t(N * OC), x.rng);
  dev::round_all(t, bias);
  dev::round_all(t, res);
  Bytes d_x(qx.codes.size()), d_xt(qx.codes.size()), d_w(qw.codes.size()), d_wt(qw.codes.size()),
      d_g(qg.codes.size()), d_gt(qg.codes.size());
  d_x.upload(qx.codes);
  d_xt.upload(transpose(qx.codes, N, C));
  d_w.upload(qw.codes);
  d_wt.upload(transpose(qw.codes, OC, C));
  d_g.upload(qg.codes);
  d_gt.upload(transpose(qg.codes, N, OC));
  // (Each scale 16-byte aligned, as cuBLASLt requires.)
  dev::Buffer d_inv(DType::f32, 12);
  d_inv.upload({1.0f / sx, 0, 0, 0, 1.0f / sw, 0, 0, 0, 1.0f / sg, 0, 0, 0});
  const cu::Fp8Operand ox{d_x.p, d_inv.f(), Fp8Format::e4m3}, oxt{d_xt.p, d_inv.f(), Fp8Format::e4m3},
      ow{d_w.p, d_inv.f() + 4, Fp8Format::e4m3}, owt{d_wt.p, d_inv.f() + 4, Fp8Format::e4m3},
      og{d_g.p, d_inv.f() + 8, Fp8Format::e5m2}, ogt{d_gt.p, d_inv.f() + 8, Fp8Format::e5m2};
  cu::LinearOptions lo;
  // forward + bias + residual
  std::vector<float> want(size_t(N * OC));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < OC; ++o) {
      double acc = bias[size_t(o)] + double(res[size_t(n * OC + o)]);
      for (int64_t c = 0; c < C; ++c) acc += qx.values[size_t(n * C + c)] * qw.values[size_t(o * C + c)];
      want[size_t(n * OC + o)] = float(acc);
    }
  dev::Buffer d_b(t, size_t(OC)), d_res(t, size_t(N * OC)), d_out(t, size_t(N * OC));
  d_b.upload(bias);
  d_res.upload(res);
  const bool fwd = cu::fp8_linear_forward(*x.gemm, t, d_out.get(), nullptr, ox, ow, d_b.get(),
                                          d_res.get(), N, C, OC, lo, nullptr);
  x.r.check("fp8_linear_forward has an algorithm" + tag, fwd);
  if (fwd) x.r.record("fp8_linear_forward bias+residual" + tag, t, dev::rel_err(d_out.download(), want), tol_for(t));
  // dgrad: dinp (N, C) = dout . W
  std::vector<float> want_dx(size_t(N * C));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) {
      double acc = 0;
      for (int64_t o = 0; o < OC; ++o) acc += qg.values[size_t(n * OC + o)] * qw.values[size_t(o * C + c)];
      want_dx[size_t(n * C + c)] = float(acc);
    }
  dev::Buffer d_dx(t, size_t(N * C));
  const bool dgrad = cu::fp8_linear_backward_input(*x.gemm, t, d_dx.get(), og, owt, N, C, OC,
                                                   nullptr, nullptr, x.scratch, nullptr);
  x.r.check("fp8_linear_backward_input has an algorithm" + tag, dgrad);
  if (dgrad) x.r.record("fp8_linear_backward_input" + tag, t, dev::rel_err(d_dx.download(), want_dx), tol_for(t));
  // wgrad: dweight (OC, C) += dout^T x, fp32
  std::vector<float> dw0 = dev::randn(size_t(OC * C), x.rng, 1e-3f), want_dw(size_t(OC * C));
  for (int64_t o = 0; o < OC; ++o)
    for (int64_t c = 0; c < C; ++c) {
      double acc = 0;
      for (int64_t n = 0; n < N; ++n) acc += qg.values[size_t(n * OC + o)] * qx.values[size_t(n * C + c)];
      want_dw[size_t(o * C + c)] = float(acc);
    }
  dev::Buffer d_dw(DType::f32, size_t(OC * C));
  d_dw.upload(dw0);
  const bool wgrad = cu::fp8_linear_backward_weight(*x.gemm, d_dw.f(), ogt, oxt, N, C, OC, nullptr);
  x.r.check("fp8_linear_backward_weight has an algorithm" + tag, wgrad);
  if (wgrad) {
    std::vector<float> got = d_dw.download();
    for (size_t i = 0; i < got.size(); ++i) got[i] -= dw0[i];
    // (Hopper's FP8 tensor cores add their products at less than fp32's precision.)
    x.r.record("fp8_linear_backward_weight (+=)" + tag, t, dev::rel_err(got, want_dw), 5e-4);
  }
  // Sizes not a multiple of 16: refused, nothing run.
  x.r.check("fp8 GEMM refuses N=" + std::to_string(N + 8),
            !cu::fp8_linear_forward(*x.gemm, t, d_out.get(), nullptr, ox, ow, nullptr, nullptr,
                                    N + 8, C, OC, lo, nullptr));
}

// Fp8Training's linear layer against the 16-bit one on the same inputs: the FP8 rounding
// (3 mantissa bits forward, 2 backward) bounds the agreement, a few percent.
void check_training(CudaContext& x, DType t) {
  const int64_t N = 256, C = 128, OC = 384;
  cu::Fp8Training fp8(1, N * std::max(C, OC), OC * C, 4, 0);
  auto inp = dev::randn(size_t(N * C), x.rng), w = dev::randn(size_t(OC * C), x.rng, 0.05f);
  auto b = dev::randn(size_t(OC), x.rng, 0.1f), dout = dev::randn(size_t(N * OC), x.rng, 1e-3f);
  for (auto* v : {&inp, &w, &b, &dout}) dev::round_all(t, *v);
  dev::Buffer d_inp(t, inp.size()), d_w(t, w.size()), d_b(t, b.size()), d_dout(t, dout.size()),
      d_out8(t, size_t(N * OC)), d_out(t, size_t(N * OC)), d_dx8(t, inp.size()), d_dx(t, inp.size()),
      d_dw8(DType::f32, w.size()), d_dw(DType::f32, w.size());
  d_inp.upload(inp);
  d_w.upload(w);
  d_b.upload(b);
  d_dout.upload(dout);
  d_dw8.zero();
  d_dw.zero();
  cu::LinearOptions lo;
  // Two steps: the first at scale 1 records the amaxes, the update sets the scales.
  for (int step = 0; step < 2; ++step) {
    const bool f = fp8.forward(*x.gemm, t, 0, d_out8.get(), nullptr, d_inp.get(), d_w.get(),
                               d_b.get(), nullptr, N, C, OC, lo, nullptr);
    const bool bw = fp8.backward_weight(*x.gemm, t, 0, d_dw8.f(), nullptr, d_dout.get(),
                                        d_inp.get(), N, C, OC, x.scratch, nullptr);
    const bool bi = fp8.backward_input(*x.gemm, t, 0, d_dx8.get(), d_w.get(), N, C, OC, nullptr,
                                       nullptr, x.scratch, nullptr);
    x.r.check("Fp8Training takes forward, weight and input gradients (step " + std::to_string(step) + ")",
              f && bw && bi);
    if (step == 0) {
      fp8.update_scales(nullptr);
      d_dw8.zero();
    }
  }
  std::vector<float> strided(12), scales(3);
  dev::check_cuda(cudaDeviceSynchronize(), "kernel");
  dev::check_cuda(cudaMemcpy(strided.data(), fp8.arrays().scale, 48, cudaMemcpyDeviceToHost), "D2H");
  for (int i = 0; i < 3; ++i) scales[size_t(i)] = strided[size_t(i * fp8.arrays().scale_stride)];
  float amax_x = 0, amax_w = 0, amax_g = 0;
  for (float v : inp) amax_x = std::max(amax_x, std::fabs(v));
  for (float v : w) amax_w = std::max(amax_w, std::fabs(v));
  for (float v : dout) amax_g = std::max(amax_g, std::fabs(v));
  x.r.record("Fp8Training input scale = 448 / amax", DType::f32, std::fabs(scales[0] * amax_x / 448.0 - 1), 1e-6);
  x.r.record("Fp8Training weight scale = 448 / amax", DType::f32, std::fabs(scales[1] * amax_w / 448.0 - 1), 1e-6);
  x.r.record("Fp8Training gradient scale = 57344 / amax", DType::f32, std::fabs(scales[2] * amax_g / 57344.0 - 1), 1e-6);
  cu::linear_forward(*x.gemm, t, d_out.get(), nullptr, d_inp.get(), d_w.get(), d_b.get(), nullptr,
                     N, C, OC, lo, nullptr);
  cu::linear_backward_weight(*x.gemm, t, d_dw.f(), nullptr, d_dout.get(), d_inp.get(), N, C, OC, OC,
                             1.0f, x.scratch, lo, nullptr);
  cu::linear_backward_input(*x.gemm, t, d_dx.get(), d_dout.get(), d_w.get(), N, C, OC, OC, 1.0f,
                            nullptr, nullptr, x.scratch, lo, nullptr);
  x.r.record("Fp8Training forward vs 16-bit", t, dev::rel_err(d_out8.download(), d_out.download()), 0.08);
  x.r.record("Fp8Training weight gradient vs 16-bit", t, dev::rel_err(d_dw8.download(), d_dw.download()), 0.12);
  x.r.record("Fp8Training input gradient vs 16-bit", t, dev::rel_err(d_dx8.download(), d_dx.download()), 0.12);
}

// The CUDA GPT with FP8 linear layers against the same model in bf16 (and the loss against
// the CPU model's): one forward and backward, then 30 AdamW steps on one batch; the FP8
// model's losses must follow the bf16 model's. A llama-family shape too.
void check_model(Recorder& r, const nn::GptConfig& c, const std::string& name) {
  nn::GptRunOptions o;
  o.batch = 4;
  o.seq = 64;
  o.seed = 42;
  o.cpu_backend = "reference";
  auto cpu = nn::make_gpt_cpu(c, o);
  o.precision = DType::bf16;
  auto bf16 = nn::make_gpt_cuda(c, o);
  o.fp8 = true;
  auto fp8 = nn::make_gpt_cuda(c, o);
  const int64_t N = o.batch * o.seq, P = c.num_params();
  std::vector<float> params(static_cast<size_t>(P));
  cpu->get_params(params.data());
  bf16->set_params(params.data());
  fp8->set_params(params.data());
  std::mt19937 rng(9);
  std::uniform_int_distribution<int32_t> tok(0, int32_t(c.vocab_size - 1));
  std::vector<int32_t> in(static_cast<size_t>(N)), tg(static_cast<size_t>(N));
  for (auto& v : in) v = tok(rng);
  for (size_t i = 0; i < tg.size(); ++i) tg[i] = in[(i + 1) % tg.size()];
  const float lc = cpu->forward(in.data(), tg.data());
  const float l8 = fp8->forward(in.data(), tg.data());
  r.record(name + " fp8 loss vs the CPU model", DType::bf16, std::fabs(l8 - lc) / lc, 2e-2);
  fp8->zero_grad();
  bf16->zero_grad();
  bf16->forward(in.data(), tg.data());
  bf16->backward(1.0f);
  fp8->backward(1.0f);
  std::vector<float> g16(static_cast<size_t>(P)), g8(static_cast<size_t>(P));
  bf16->get_grads(g16.data());
  fp8->get_grads(g8.data());
  r.record(name + " fp8 gradients vs bf16", DType::bf16, dev::rel_err(g8, g16), 0.15);
  ops::AdamWParams hp;
  hp.lr = 1e-3f;
  float first16 = 0, first8 = 0, last16 = 0, last8 = 0;
  for (int step = 1; step <= 30; ++step) {
    hp.step = step;
    for (auto* m : {bf16.get(), fp8.get()}) {
      m->zero_grad();
      const float loss = m->forward(in.data(), tg.data());
      m->backward(1.0f);
      m->update(hp);
      (m == fp8.get() ? last8 : last16) = loss;
      if (step == 1) (m == fp8.get() ? first8 : first16) = loss;
    }
  }
  std::printf("  %s: loss over 30 steps bf16 %.4f -> %.4f, fp8 %.4f -> %.4f\n", name.c_str(),
              double(first16), double(last16), double(first8), double(last8));
  r.check(name + " fp8 training lowers the loss", last8 < 0.8f * first8);
  r.record(name + " fp8 loss after 30 steps vs bf16", DType::bf16,
           std::fabs(double(last8) - double(last16)) / double(last16), 0.05);
  r.check(name + " fp8 model holds more memory (its FP8 operands)",
          fp8->memory_bytes() > bf16->memory_bytes());
}

bool has_fp8_tensor_cores() {
  int dev_id = 0;
  cudaDeviceProp p{};
  dev::check_cuda(cudaGetDevice(&dev_id), "cudaGetDevice");
  dev::check_cuda(cudaGetDeviceProperties(&p, dev_id), "cudaGetDeviceProperties");
  return p.major * 10 + p.minor >= 89;
}

}  // namespace

CudaFamily cuda_fp8_family() {
  CudaFamily f;
  f.name = "fp8";
  f.ops = {Op::fp8_quantize, Op::fp8_scale_update};
  f.dtypes = {DType::bf16, DType::f32};
  f.tolerance_note = "codes, amax, scales exact; FP8 GEMMs vs double products of the codes; "
                     "FP8 layer vs 16-bit within 8-12 %";
  f.run = [](CudaContext& x, DType t) {
    check_quantize(x, t, 96, 160, Fp8Format::e4m3);
    check_quantize(x, t, 64, 48, Fp8Format::e5m2);
    check_quantize(x, t, 272, 1040, Fp8Format::e4m3);
    if (t != DType::bf16) return;
    check_scale_update(x);
    if (!has_fp8_tensor_cores()) return;  // the GEMMs need sm_89 or newer
    check_gemms(x, t, 128, 256, 384);
    check_gemms(x, t, 64, 768, 2304);
    check_training(x, t);
    nn::GptConfig gpt;
    gpt.n_layer = 2, gpt.n_head = 4, gpt.n_embd = 128, gpt.block_size = 64, gpt.vocab_size = 512;
    check_model(x.r, gpt, "gpt2 L2 C128");
    nn::GptConfig llama = nn::gpt_preset("llama-tiny");
    llama.n_layer = 2, llama.n_head = 4, llama.n_kv_head = 2, llama.n_embd = 128;
    llama.ffn_hidden = 352, llama.vocab_size = 512, llama.tie_embeddings = false;
    llama.block_size = 64;
    check_model(x.r, llama, "llama L2 C128 KV2 F352");
  };
  return f;
}

}  // namespace aiscale::ops::testing
