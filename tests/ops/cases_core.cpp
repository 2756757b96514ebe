// test_ops cases for matmul, embedding, layernorm, GELU and residual.
#include <cmath>

#include <fmt/format.h>

#include "harness.h"

namespace aiscale::ops::testing {
namespace {

// ---------------------------------------------------------------------------------------

class MatmulCase : public DiffCase {
 public:
  MatmulCase(int64_t N, int64_t C, int64_t OC, bool with_bias)
      : N(N), C(C), OC(OC), with_bias(with_bias) {}
  std::string shape() const override {
    return fmt::format("N={} C={} OC={}{}", N, C, OC, with_bias ? "" : " no-bias");
  }
  void init(Rng& rng) override {
    inp.resize(N * C);
    weight.resize(OC * C);
    bias.resize(OC);
    fill_normal(inp, rng);
    fill_normal(weight, rng, 1.0f / std::sqrt(float(C)));
    fill_normal(bias, rng, 0.5f);
    out.resize(N * OC);
    dout_.resize(N * OC);
    dinp.resize(N * C);
    dweight.resize(OC * C);
    dbias.resize(OC);
  }
  std::vector<Buf> outputs() override { return {{"out", &out}}; }
  void forward(const Backend& be) override {
    be.matmul_forward(out.data(), inp.data(), weight.data(), with_bias ? bias.data() : nullptr, N,
                      C, OC);
  }
  Floats& loss_output() override { return out; }
  Floats& dout() override { return dout_; }
  std::vector<GradLink> grads() override {
    std::vector<GradLink> links{{"inp", &inp, &dinp, false}, {"weight", &weight, &dweight, true}};
    if (with_bias) links.push_back({"bias", &bias, &dbias, true});
    return links;
  }
  void backward(const Backend& be) override {
    be.matmul_backward(dinp.data(), dweight.data(), with_bias ? dbias.data() : nullptr,
                       dout_.data(), inp.data(), weight.data(), N, C, OC);
  }

 private:
  int64_t N, C, OC;
  bool with_bias;
  Floats inp, weight, bias, out, dout_, dinp, dweight, dbias;
};

// ---------------------------------------------------------------------------------------

class EmbeddingCase : public DiffCase {
 public:
  EmbeddingCase(int64_t B, int64_t T, int64_t C, int64_t V, int64_t max_T)
      : B(B), T(T), C(C), V(V), max_T(max_T) {}
  std::string shape() const override {
    return fmt::format("B={} T={} C={} V={} maxT={}", B, T, C, V, max_T);
  }
  void init(Rng& rng) override {
    tokens.resize(B * T);
    // few distinct tokens, so the same wte row receives several gradients
    const int64_t distinct = std::min<int64_t>(V, 7);
    for (int32_t& t : tokens) t = int32_t(int64_t(rng.below(uint64_t(distinct))) * (V / 7 + 1) % V);
    tokens.back() = int32_t(V - 1);
    wte.resize(V * C);
    wpe.resize(max_T * C);
    fill_normal(wte, rng);
    fill_normal(wpe, rng);
    out.resize(B * T * C);
    dout_.resize(B * T * C);
    dwte.resize(V * C);
    dwpe.resize(max_T * C);
  }
  std::vector<Buf> outputs() override { return {{"out", &out}}; }
  void forward(const Backend& be) override {
    be.embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
  }
  Floats& loss_output() override { return out; }
  Floats& dout() override { return dout_; }
  std::vector<GradLink> grads() override {
    return {{"wte", &wte, &dwte, true}, {"wpe", &wpe, &dwpe, true}};
  }
  void backward(const Backend& be) override {
    be.embedding_backward(dwte.data(), dwpe.data(), dout_.data(), tokens.data(), B, T, C);
  }

 private:
  int64_t B, T, C, V, max_T;
  std::vector<int32_t> tokens;
  Floats wte, wpe, out, dout_, dwte, dwpe;
};

// ---------------------------------------------------------------------------------------

class LayernormCase : public DiffCase {
 public:
  LayernormCase(int64_t N, int64_t C) : N(N), C(C) {}
  std::string shape() const override { return fmt::format("N={} C={}", N, C); }
  void init(Rng& rng) override {
    inp.resize(N * C);
    weight.resize(C);
    bias.resize(C);
    for (float& x : inp) x = 3.0f + 2.0f * rng.normal();  // an offset: the mean matters
    for (float& w : weight) w = 1.0f + 0.3f * rng.normal();
    fill_normal(bias, rng, 0.3f);
    out.resize(N * C);
    mean.resize(N);
    rstd.resize(N);
    dout_.resize(N * C);
    dinp.resize(N * C);
    dweight.resize(C);
    dbias.resize(C);
  }
  std::vector<Buf> outputs() override { return {{"out", &out}, {"mean", &mean}, {"rstd", &rstd}}; }
  void forward(const Backend& be) override {
    be.layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(),
                         bias.data(), N, C);
  }
  Floats& loss_output() override { return out; }
  Floats& dout() override { return dout_; }
  std::vector<GradLink> grads() override {
    return {{"inp", &inp, &dinp, true}, {"weight", &weight, &dweight, true},
            {"bias", &bias, &dbias, true}};
  }
  void backward(const Backend& be) override {
    be.layernorm_backward(dinp.data(), dweight.data(), dbias.data(), dout_.data(), inp.data(),
                          weight.data(), mean.data(), rstd.data(), N, C);
  }

 private:
  int64_t N, C;
  Floats inp, weight, bias, out, mean, rstd, dout_, dinp, dweight, dbias;
};

// ---------------------------------------------------------------------------------------

class GeluCase : public DiffCase {
 public:
  explicit GeluCase(int64_t n) : n(n) {}
  std::string shape() const override { return fmt::format("n={}", n); }
  void init(Rng& rng) override {
    inp.resize(n);
    fill_normal(inp, rng, 2.5f);
    if (n > 4) inp[0] = -12.0f, inp[1] = 12.0f, inp[2] = 0.0f, inp[3] = -4.0f;  // tails, 0
    out.resize(n);
    dout_.resize(n);
    dinp.resize(n);
  }
  std::vector<Buf> outputs() override { return {{"out", &out}}; }
  void forward(const Backend& be) override { be.gelu_forward(out.data(), inp.data(), n); }
  Floats& loss_output() override { return out; }
  Floats& dout() override { return dout_; }
  std::vector<GradLink> grads() override { return {{"inp", &inp, &dinp, false}}; }
  void backward(const Backend& be) override {
    be.gelu_backward(dinp.data(), inp.data(), dout_.data(), n);
  }
  // gelu_backward with dinp aliasing dout, in both backends.
  void extra_checks(const Backend& fast, const Backend& ref, Outcome& outcome) override {
    Rng rng(7);
    fill_normal(dout_, rng);
    ref.gelu_backward(dinp.data(), inp.data(), dout_.data(), n);
    const Floats expected = dinp;
    for (const Backend* be : {&ref, &fast}) {
      Floats in_place = dout_;
      be->gelu_backward(in_place.data(), inp.data(), in_place.data(), n);
      outcome.check(fmt::format("{} {} in-place backward (dinp == dout)", shape(), be->name),
                    max_error(in_place, expected), 1e-5);
    }
  }

 private:
  int64_t n;
  Floats inp, out, dout_, dinp;
};

// ---------------------------------------------------------------------------------------

class ResidualCase : public DiffCase {
 public:
  explicit ResidualCase(int64_t n) : n(n) {}
  std::string shape() const override { return fmt::format("n={}", n); }
  void init(Rng& rng) override {
    a.resize(n);
    b.resize(n);
    fill_normal(a, rng);
    fill_normal(b, rng);
    out.resize(n);
    dout_.resize(n);
    da.resize(n);
    db.resize(n);
  }
  std::vector<Buf> outputs() override { return {{"out", &out}}; }
  void forward(const Backend& be) override {
    be.residual_forward(out.data(), a.data(), b.data(), n);
  }
  Floats& loss_output() override { return out; }
  Floats& dout() override { return dout_; }
  std::vector<GradLink> grads() override { return {{"a", &a, &da, true}, {"b", &b, &db, true}}; }
  void backward(const Backend& be) override {
    be.residual_backward(da.data(), db.data(), dout_.data(), n);
  }

 private:
  int64_t n;
  Floats a, b, out, dout_, da, db;
};

}  // namespace

// ---------------------------------------------------------------------------------------

OpFamily matmul_family() {
  OpFamily f;
  f.name = "matmul";
  f.ops = {Op::matmul_forward, Op::matmul_backward};
  f.tolerances = {
      .forward = 2e-5, .backward = 2e-5, .fd = 5e-4, .fd_step = 1e-2f, .fd_samples = 48};
  f.test_cases = [] {
    return make_cases<MatmulCase, int64_t, int64_t, int64_t, bool>(
        {{1, 1, 1, true}, {7, 13, 5, true}, {7, 13, 5, false}, {33, 64, 17, true},
         {64, 256, 768, true}, {128, 1024, 256, true}, {16, 256, 1000, false}});
  };
  f.grad_cases = [] {
    return make_cases<MatmulCase, int64_t, int64_t, int64_t, bool>(
        {{1, 1, 1, true}, {7, 13, 5, true}, {4, 32, 24, false}, {17, 64, 61, true}});
  };
  return f;
}

OpFamily embedding_family() {
  OpFamily f;
  f.name = "embedding";
  f.ops = {Op::embedding_forward, Op::embedding_backward};
  // backward: float sums over repeated tokens, in different orders
  f.tolerances = {
      .forward = 0.0, .backward = 1e-5, .fd = 2e-4, .fd_step = 1e-2f, .fd_samples = 48};
  f.tolerance_note = "forward must be exact";
  f.test_cases = [] {
    return make_cases<EmbeddingCase, int64_t, int64_t, int64_t, int64_t, int64_t>(
        {{1, 1, 1, 1, 1}, {2, 17, 13, 61, 20}, {8, 128, 256, 512, 128}, {3, 5, 7, 11, 9}});
  };
  f.grad_cases = [] {
    return make_cases<EmbeddingCase, int64_t, int64_t, int64_t, int64_t, int64_t>(
        {{2, 5, 7, 11, 6}, {3, 17, 13, 61, 20}});
  };
  return f;
}

OpFamily layernorm_family() {
  OpFamily f;
  f.name = "layernorm";
  f.ops = {Op::layernorm_forward, Op::layernorm_backward};
  f.tolerances = {
      .forward = 2e-5, .backward = 2e-5, .fd = 2e-3, .fd_step = 1e-2f, .fd_samples = 48};
  f.test_cases = [] {
    return make_cases<LayernormCase, int64_t, int64_t>(
        {{1, 1}, {7, 13}, {17, 256}, {64, 768}, {1024, 256}});
  };
  f.grad_cases = [] {
    return make_cases<LayernormCase, int64_t, int64_t>({{5, 13}, {3, 64}, {4, 256}});
  };
  return f;
}

OpFamily gelu_family() {
  OpFamily f;
  f.name = "gelu";
  f.ops = {Op::gelu_forward, Op::gelu_backward};
  f.tolerances = {
      .forward = 1e-5, .backward = 1e-5, .fd = 5e-4, .fd_step = 1e-2f, .fd_samples = 64};
  f.test_cases = [] { return make_cases<GeluCase, int64_t>({{1}, {7}, {1000}, {100003}}); };
  f.grad_cases = [] { return make_cases<GeluCase, int64_t>({{37}, {1000}}); };
  return f;
}

OpFamily residual_family() {
  OpFamily f;
  f.name = "residual";
  f.ops = {Op::residual_forward, Op::residual_backward};
  f.tolerances = {
      .forward = 0.0, .backward = 1e-6, .fd = 2e-4, .fd_step = 1e-2f, .fd_samples = 32};
  f.tolerance_note = "forward must be exact";
  f.test_cases = [] { return make_cases<ResidualCase, int64_t>({{1}, {7}, {100003}}); };
  f.grad_cases = [] { return make_cases<ResidualCase, int64_t>({{1}, {23}}); };
  return f;
}

}  // namespace aiscale::ops::testing
