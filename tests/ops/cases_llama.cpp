// test_ops cases for the llama family's ops: RMSNorm, rotary positions, SwiGLU and
// grouped-query attention.
#include <cmath>

#include <fmt/format.h>

#include "aiscale/nn/models/gpt_rope.h"

#include "harness.h"

namespace aiscale::ops::testing {
namespace {

class RmsnormCase : public DiffCase {
 public:
  RmsnormCase(int64_t N, int64_t C) : N(N), C(C) {}
  std::string shape() const override { return fmt::format("N={} C={}", N, C); }
  void init(Rng& rng) override {
    inp.resize(N * C);
    weight.resize(C);
    for (float& x : inp) x = 1.5f + 2.0f * rng.normal();  // an offset: RMSNorm keeps the mean
    for (float& w : weight) w = 1.0f + 0.3f * rng.normal();
    out.resize(N * C);
    rstd.resize(N);
    dout_.resize(N * C);
    dinp.resize(N * C);
    dweight.resize(C);
  }
  std::vector<Buf> outputs() override { return {{"out", &out}, {"rstd", &rstd}}; }
  void forward(const Backend& be) override {
    be.rmsnorm_forward(out.data(), rstd.data(), inp.data(), weight.data(), N, C, 1e-5f);
  }
  Floats& loss_output() override { return out; }
  Floats& dout() override { return dout_; }
  std::vector<GradLink> grads() override {
    return {{"inp", &inp, &dinp, true}, {"weight", &weight, &dweight, true}};
  }
  void backward(const Backend& be) override {
    be.rmsnorm_backward(dinp.data(), dweight.data(), dout_.data(), inp.data(), weight.data(),
                        rstd.data(), N, C);
  }
  // rstd against its definition, in double.
  void extra_checks(const Backend& fast, const Backend&, Outcome& outcome) override {
    forward(fast);
    double worst = 0.0;
    for (int64_t n = 0; n < N; ++n) {
      double sum = 0.0;
      for (int64_t c = 0; c < C; ++c) sum += double(inp[n * C + c]) * inp[n * C + c];
      const double want = 1.0 / std::sqrt(sum / double(C) + 1e-5);
      worst = std::max(worst, std::fabs(rstd[n] - want) / want);
    }
    outcome.check(fmt::format("{} rstd = 1/sqrt(mean(x^2) + eps)", shape()), worst, 1e-6);
  }

 private:
  int64_t N, C;
  Floats inp, weight, out, rstd, dout_, dinp, dweight;
};

// Fused QKV activations of NH query and NKV key/value heads, rotated with the table of a
// Llama 3 configuration (scaled frequencies).
class RopeCase : public DiffCase {
 public:
  RopeCase(int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS)
      : B(B), T(T), NH(NH), NKV(NKV), HS(HS) {}
  std::string shape() const override {
    return fmt::format("B={} T={} NH={} NKV={} HS={}", B, T, NH, NKV, HS);
  }
  void init(Rng& rng) override {
    nn::GptConfig c;
    c.family = nn::GptFamily::llama;
    c.n_head = NH;
    c.n_embd = NH * HS;
    c.rope_theta = 500000.0;
    c.rope_scaling = {8.0, 1.0, 4.0, 16};  // a short original context: every band in use
    table = nn::rope_table(c, T);
    const int64_t W = (NH + 2 * NKV) * HS;
    inp.resize(B * T * W);
    fill_normal(inp, rng);
    out.resize(inp.size());
    dout_.resize(inp.size());
    dinp.resize(inp.size());
  }
  std::vector<Buf> outputs() override { return {{"out", &out}}; }
  void forward(const Backend& be) override {
    be.rope_forward(out.data(), inp.data(), table.cos.data(), table.sin.data(), B * T, T, NH, NKV,
                    HS);
  }
  Floats& loss_output() override { return out; }
  Floats& dout() override { return dout_; }
  std::vector<GradLink> grads() override { return {{"inp", &inp, &dinp, false}}; }
  void backward(const Backend& be) override {
    be.rope_backward(dinp.data(), dout_.data(), table.cos.data(), table.sin.data(), B * T, T, NH,
                     NKV, HS);
  }
  // In place (the model's use) gives the out-of-place result; position 0 is the identity;
  // the V heads are copied.
  void extra_checks(const Backend& fast, const Backend&, Outcome& outcome) override {
    forward(fast);
    Floats in_place = inp;
    fast.rope_forward(in_place.data(), in_place.data(), table.cos.data(), table.sin.data(), B * T,
                      T, NH, NKV, HS);
    outcome.check(fmt::format("{} in place = out of place", shape()),
                  in_place == out ? 0.0 : 1.0, 0.0);
    const int64_t W = (NH + 2 * NKV) * HS;
    double worst = 0.0;
    for (int64_t i = 0; i < W; ++i) worst = std::max(worst, double(std::fabs(out[i] - inp[i])));
    for (int64_t n = 0; n < B * T; ++n)
      for (int64_t i = (NH + NKV) * HS; i < W; ++i)
        worst = std::max(worst, double(std::fabs(out[n * W + i] - inp[n * W + i])));
    outcome.check(fmt::format("{} position 0 and V unchanged", shape()), worst, 0.0);
  }

 private:
  int64_t B, T, NH, NKV, HS;
  nn::RopeTable table;
  Floats inp, out, dout_, dinp;
};

class SwigluCase : public DiffCase {
 public:
  SwigluCase(int64_t N, int64_t F) : N(N), F(F) {}
  std::string shape() const override { return fmt::format("N={} F={}", N, F); }
  void init(Rng& rng) override {
    inp.resize(N * 2 * F);
    fill_normal(inp, rng, 2.5f);
    if (F > 2) inp[0] = -30.0f, inp[1] = 30.0f;  // the sigmoid's tails
    out.resize(N * F);
    dout_.resize(N * F);
    dinp.resize(N * 2 * F);
  }
  std::vector<Buf> outputs() override { return {{"out", &out}}; }
  void forward(const Backend& be) override { be.swiglu_forward(out.data(), inp.data(), N, F); }
  Floats& loss_output() override { return out; }
  Floats& dout() override { return dout_; }
  std::vector<GradLink> grads() override { return {{"gate_up", &inp, &dinp, false}}; }
  void backward(const Backend& be) override {
    be.swiglu_backward(dinp.data(), inp.data(), dout_.data(), N, F);
  }

 private:
  int64_t N, F;
  Floats inp, out, dout_, dinp;
};

class GqaAttentionCase : public DiffCase {
 public:
  GqaAttentionCase(int64_t B, int64_t T, int64_t C, int64_t NH, int64_t NKV)
      : B(B), T(T), C(C), NH(NH), NKV(NKV) {}
  std::string shape() const override {
    return fmt::format("B={} T={} C={} NH={} NKV={} (HS={})", B, T, C, NH, NKV, C / NH);
  }
  void init(Rng& rng) override {
    W = C + 2 * NKV * (C / NH);
    qkv.resize(B * T * W);
    fill_normal(qkv, rng);
    out.resize(B * T * C);
    att.resize(B * NH * T * T);
    dout_.resize(B * T * C);
    datt.resize(B * NH * T * T);
    dqkv.resize(B * T * W);
  }
  std::vector<Buf> outputs() override { return {{"out", &out}, {"att", &att}}; }
  void forward(const Backend& be) override {
    be.attention_gqa_forward(out.data(), att.data(), qkv.data(), B, T, C, NH, NKV);
  }
  Floats& loss_output() override { return out; }
  Floats& dout() override { return dout_; }
  std::vector<Buf> scratch() override { return {{"datt", &datt}}; }
  std::vector<GradLink> grads() override { return {{"qkv", &qkv, &dqkv, false}}; }
  void backward(const Backend& be) override {
    be.attention_gqa_backward(dqkv.data(), datt.data(), dout_.data(), qkv.data(), att.data(), B,
                              T, C, NH, NKV);
  }
  // Grouped-query attention is multi-head attention over the key/value heads repeated for
  // each query head of their group: the same outputs, and the repeated heads' gradients
  // summed (both backends' GQA against the fast multi-head op).
  void extra_checks(const Backend& fast, const Backend& reference, Outcome& outcome) override {
    const int64_t HS = C / NH, group = NH / NKV;
    Floats full(B * T * 3 * C);
    for (int64_t bt = 0; bt < B * T; ++bt)
      for (int64_t h = 0; h < NH; ++h)
        for (int64_t i = 0; i < HS; ++i) {
          const int64_t kv = h / group;
          full[bt * 3 * C + h * HS + i] = qkv[bt * W + h * HS + i];
          full[bt * 3 * C + C + h * HS + i] = qkv[bt * W + C + kv * HS + i];
          full[bt * 3 * C + 2 * C + h * HS + i] = qkv[bt * W + C + NKV * HS + kv * HS + i];
        }
    Floats mha_out(B * T * C), mha_att(att.size()), mha_dfull(full.size()), scratch(att.size());
    fast.attention_forward(mha_out.data(), mha_att.data(), full.data(), B, T, C, NH);
    fast.attention_backward(mha_dfull.data(), scratch.data(), dout_.data(), full.data(),
                            mha_att.data(), B, T, C, NH);
    Floats want(qkv.size(), 0.0f);
    for (int64_t bt = 0; bt < B * T; ++bt)
      for (int64_t h = 0; h < NH; ++h)
        for (int64_t i = 0; i < HS; ++i) {
          const int64_t kv = h / group;
          want[bt * W + h * HS + i] = mha_dfull[bt * 3 * C + h * HS + i];
          want[bt * W + C + kv * HS + i] += mha_dfull[bt * 3 * C + C + h * HS + i];
          want[bt * W + C + NKV * HS + kv * HS + i] += mha_dfull[bt * 3 * C + 2 * C + h * HS + i];
        }
    for (const Backend* be : {&fast, &reference}) {
      forward(*be);
      backward(*be);
      outcome.check(fmt::format("{} {} out = multi-head over repeated heads", be->name, shape()),
                    max_error(out, mha_out), 2e-5);
      outcome.check(fmt::format("{} {} dqkv = repeated heads' gradients summed", be->name,
                                shape()),
                    max_error(dqkv, want), 5e-5);
    }
    // One key/value head per query head: the multi-head op, bit for bit (fast backend).
    if (NKV == NH) {
      forward(fast);
      outcome.check(fmt::format("{} NKV = NH is attention_forward bit for bit", shape()),
                    out == mha_out ? 0.0 : 1.0, 0.0);
    }
  }

 private:
  int64_t B, T, C, NH, NKV, W = 0;
  Floats qkv, out, att, dout_, datt, dqkv;
};

}  // namespace

OpFamily rmsnorm_family() {
  OpFamily f;
  f.name = "rmsnorm";
  f.ops = {Op::rmsnorm_forward, Op::rmsnorm_backward};
  f.tolerances = {
      .forward = 2e-5, .backward = 2e-5, .fd = 2e-3, .fd_step = 1e-2f, .fd_samples = 48};
  f.test_cases = [] {
    return make_cases<RmsnormCase, int64_t, int64_t>(
        {{1, 1}, {7, 13}, {17, 256}, {64, 768}, {1024, 256}});
  };
  f.grad_cases = [] {
    return make_cases<RmsnormCase, int64_t, int64_t>({{5, 13}, {3, 64}, {4, 256}});
  };
  return f;
}

OpFamily rope_family() {
  OpFamily f;
  f.name = "rope";
  f.ops = {Op::rope_forward, Op::rope_backward};
  f.tolerances = {
      .forward = 2e-6, .backward = 2e-6, .fd = 1e-3, .fd_step = 1e-2f, .fd_samples = 48};
  f.test_cases = [] {
    return make_cases<RopeCase, int64_t, int64_t, int64_t, int64_t, int64_t>(
        {{1, 1, 1, 1, 2}, {2, 9, 4, 2, 16}, {3, 17, 6, 3, 10}, {4, 64, 8, 2, 64},
         {1, 128, 32, 8, 64}});
  };
  f.grad_cases = [] {
    return make_cases<RopeCase, int64_t, int64_t, int64_t, int64_t, int64_t>(
        {{1, 3, 1, 1, 2}, {2, 9, 4, 2, 16}, {1, 7, 6, 3, 10}});
  };
  return f;
}

OpFamily swiglu_family() {
  OpFamily f;
  f.name = "swiglu";
  f.ops = {Op::swiglu_forward, Op::swiglu_backward};
  f.tolerances = {
      .forward = 2e-6, .backward = 5e-6, .fd = 2e-3, .fd_step = 1e-2f, .fd_samples = 64};
  f.test_cases = [] {
    return make_cases<SwigluCase, int64_t, int64_t>({{1, 1}, {7, 13}, {64, 688}, {256, 1024}});
  };
  f.grad_cases = [] { return make_cases<SwigluCase, int64_t, int64_t>({{3, 5}, {4, 64}}); };
  return f;
}

OpFamily attention_gqa_family() {
  OpFamily f;
  f.name = "attention_gqa";
  f.ops = {Op::attention_gqa_forward, Op::attention_gqa_backward};
  f.tolerances = {
      .forward = 2e-5, .backward = 5e-5, .fd = 1e-3, .fd_step = 1e-2f, .fd_samples = 64};
  f.test_cases = [] {
    return make_cases<GqaAttentionCase, int64_t, int64_t, int64_t, int64_t, int64_t>(
        // groups of 1, 2, 3, 4; HS = 4, 5, 16, 32, 64
        {{1, 1, 4, 1, 1}, {2, 17, 12, 3, 1}, {3, 7, 15, 3, 3}, {2, 33, 64, 4, 2},
         {1, 9, 128, 4, 1}, {2, 64, 256, 8, 2}, {2, 20, 96, 6, 2}});
  };
  f.grad_cases = [] {
    return make_cases<GqaAttentionCase, int64_t, int64_t, int64_t, int64_t, int64_t>(
        {{1, 5, 8, 2, 1}, {2, 6, 24, 6, 2}, {1, 9, 64, 2, 1}, {1, 7, 128, 4, 2}});
  };
  return f;
}

}  // namespace aiscale::ops::testing
