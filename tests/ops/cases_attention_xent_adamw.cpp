// test_ops cases for attention, softmax cross-entropy and AdamW, and the list of families.
#include <algorithm>
#include <cmath>

#include <omp.h>

#include <fmt/format.h>

#include "aiscale/core/error.h"

#include "harness.h"

namespace aiscale::ops::testing {
namespace {

class AttentionCase : public DiffCase {
 public:
  AttentionCase(int64_t B, int64_t T, int64_t C, int64_t NH) : B(B), T(T), C(C), NH(NH) {}
  std::string shape() const override {
    return fmt::format("B={} T={} C={} NH={} (HS={})", B, T, C, NH, C / NH);
  }
  void init(Rng& rng) override {
    qkv.resize(B * T * 3 * C);
    fill_normal(qkv, rng);
    out.resize(B * T * C);
    att.resize(B * NH * T * T);
    dout_.resize(B * T * C);
    datt.resize(B * NH * T * T);
    dqkv.resize(B * T * 3 * C);
  }
  std::vector<Buf> outputs() override { return {{"out", &out}, {"att", &att}}; }
  void forward(const Backend& be) override {
    be.attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
  }
  Floats& loss_output() override { return out; }
  Floats& dout() override { return dout_; }
  std::vector<Buf> scratch() override { return {{"datt", &datt}}; }
  std::vector<GradLink> grads() override { return {{"qkv", &qkv, &dqkv, false}}; }
  void backward(const Backend& be) override {
    be.attention_backward(dqkv.data(), datt.data(), dout_.data(), qkv.data(), att.data(), B, T, C,
                          NH);
  }
  // att: exact zeros above the diagonal, rows summing to 1 (fast backend).
  void extra_checks(const Backend& fast, const Backend&, Outcome& outcome) override {
    fill_nan(att);
    forward(fast);
    double worst_sum = 0.0;
    int64_t nonzero_above = 0;
    for (int64_t row = 0; row < B * NH * T; ++row) {
      const int64_t t = row % T;
      double sum = 0.0;
      for (int64_t t2 = 0; t2 < T; ++t2) {
        if (t2 <= t) sum += att[row * T + t2];
        else if (att[row * T + t2] != 0.0f) ++nonzero_above;
      }
      worst_sum = std::max(worst_sum, std::fabs(sum - 1.0));
    }
    outcome.check(fmt::format("{} att entries above the diagonal not exactly 0", shape()),
                  double(nonzero_above), 0.0);
    outcome.check(fmt::format("{} att rows sum to 1", shape()), worst_sum, 1e-5);
  }

 private:
  int64_t B, T, C, NH;
  Floats qkv, out, att, dout_, datt, dqkv;
};

// ---------------------------------------------------------------------------------------

class SoftmaxXentCase : public DiffCase {
 public:
  SoftmaxXentCase(int64_t N, int64_t V, float logit_scale) : N(N), V(V), logit_scale(logit_scale) {}
  std::string shape() const override {
    return fmt::format("N={} V={} logits*{}", N, V, logit_scale);
  }
  void init(Rng& rng) override {
    logits.resize(N * V);
    fill_normal(logits, rng, logit_scale);
    targets.resize(N);
    for (int32_t& t : targets) t = int32_t(rng.below(uint64_t(V)));
    if (N > 1) targets[0] = 0, targets[N - 1] = int32_t(V - 1);  // first and last class
    losses.resize(N);
    dlosses.resize(N);
    dlogits.resize(N * V);
  }
  std::vector<Buf> outputs() override { return {{"losses", &losses}}; }
  void forward(const Backend& be) override {
    be.softmax_xent_forward(losses.data(), logits.data(), targets.data(), N, V);
  }
  Floats& loss_output() override { return losses; }
  Floats& dout() override { return dlosses; }
  std::vector<GradLink> grads() override { return {{"logits", &logits, &dlogits, false}}; }
  void backward(const Backend& be) override {
    be.softmax_xent_backward(dlogits.data(), logits.data(), targets.data(), dlosses.data(), N, V);
  }
  // In place (dlogits == logits), the way training calls it, in both backends.
  void extra_checks(const Backend& fast, const Backend& ref, Outcome& outcome) override {
    Rng rng(11);
    fill_normal(dlosses, rng);
    ref.softmax_xent_backward(dlogits.data(), logits.data(), targets.data(), dlosses.data(), N, V);
    const Floats expected = dlogits;
    for (const Backend* be : {&ref, &fast}) {
      Floats in_place = logits;
      be->softmax_xent_backward(in_place.data(), in_place.data(), targets.data(), dlosses.data(),
                                N, V);
      outcome.check(fmt::format("{} {} in-place backward (dlogits == logits)", shape(), be->name),
                    max_error(in_place, expected), 1e-5);
    }
  }

 private:
  int64_t N, V;
  float logit_scale;
  Floats logits, losses, dlosses, dlogits;
  std::vector<int32_t> targets;
};

// ---------------------------------------------------------------------------------------
// AdamW: checked against the update computed by hand, in double, from the textbook
// formula (m, v moments; bias corrections; decoupled decay applied to p first).

struct AdamWCase {
  int64_t n;
  AdamWParams hp;
  bool zero_moments;  // first step from m = v = 0
};

std::vector<AdamWCase> adamw_cases() {
  return {
      {7, {.lr = 0.05f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.0f,
           .step = 1, .grad_scale = 1.0f}, true},
      {1000, {.lr = 0.05f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f,
              .step = 7, .grad_scale = 0.5f}, false},
      {100003, {.lr = 1e-3f, .beta1 = 0.8f, .beta2 = 0.999f, .eps = 1e-6f, .weight_decay = 0.5f,
                .step = 100, .grad_scale = 2.0f}, false},
  };
}

struct AdamWState {
  Floats params, grads, m, v;
};

AdamWState adamw_initial(const AdamWCase& c, uint64_t seed) {
  Rng rng(seed);
  AdamWState s{Floats(c.n), Floats(c.n), Floats(c.n), Floats(c.n)};
  fill_normal(s.params, rng);
  fill_normal(s.grads, rng, 0.1f);
  if (!c.zero_moments) {
    fill_normal(s.m, rng, 0.05f);
    for (float& x : s.v) x = 0.01f * rng.uniform() * rng.uniform();
    s.grads[0] = 0.0f;  // a zero gradient: the update is decay and momentum only
  }
  return s;
}

AdamWState adamw_by_hand(const AdamWCase& c, const AdamWState& s) {
  const AdamWParams& hp = c.hp;
  AdamWState r = s;
  for (int64_t i = 0; i < c.n; ++i) {
    const double g = double(s.grads[i]) * hp.grad_scale;
    const double m = hp.beta1 * double(s.m[i]) + (1.0 - hp.beta1) * g;
    const double v = hp.beta2 * double(s.v[i]) + (1.0 - hp.beta2) * g * g;
    const double m_hat = m / (1.0 - std::pow(double(hp.beta1), double(hp.step)));
    const double v_hat = v / (1.0 - std::pow(double(hp.beta2), double(hp.step)));
    double p = double(s.params[i]) * (1.0 - double(hp.lr) * hp.weight_decay);
    p -= hp.lr * (m_hat / (std::sqrt(v_hat) + hp.eps));
    r.params[i] = float(p), r.m[i] = float(m), r.v[i] = float(v);
  }
  return r;
}

// Error of the new params measured against the size of the step taken (after allowing
// the float rounding of p itself), so a wrong update cannot hide behind |p| >> lr.
double step_error(const Floats& got, const Floats& want, const Floats& before) {
  Floats delta(want.size());
  for (size_t i = 0; i < want.size(); ++i) delta[i] = want[i] - before[i];
  const double scale = rms(delta) + 1e-30;
  double worst = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    const double rounding = 2.0 * std::fabs(double(want[i])) * 6e-8;
    const double err = std::max(0.0, std::fabs(double(got[i]) - want[i]) - rounding);
    worst = std::max(worst, err / (std::fabs(delta[i]) + scale));
  }
  return worst;
}

void adamw_against_hand(const Backend& be, Outcome& outcome) {
  std::vector<AdamWCase> cases = adamw_cases();
  for (size_t k = 0; k < cases.size(); ++k) {
    const AdamWCase& c = cases[k];
    const AdamWState before = adamw_initial(c, 3000 + k);
    const AdamWState want = adamw_by_hand(c, before);
    AdamWState got = before;
    be.adamw_update(got.params.data(), got.grads.data(), got.m.data(), got.v.data(), c.n, c.hp);
    const std::string where = fmt::format("n={} step={} wd={} grad_scale={} {}", c.n, c.hp.step,
                                          c.hp.weight_decay, c.hp.grad_scale, be.name);
    outcome.check(where + " m vs hand", max_error(got.m, want.m), 1e-6);
    outcome.check(where + " v vs hand", max_error(got.v, want.v), 1e-6);
    outcome.check(where + " params vs hand (relative to the step)",
                  step_error(got.params, want.params, before.params), 1e-5);
    if (got.grads != before.grads) outcome.fail(where + ": grads were modified");
  }
}

void adamw_fast_vs_reference(const Backend& fast, const Backend& ref, Outcome& outcome) {
  std::vector<AdamWCase> cases = adamw_cases();
  for (size_t k = 0; k < cases.size(); ++k) {
    const AdamWCase& c = cases[k];
    const AdamWState before = adamw_initial(c, 4000 + k);
    AdamWState a = before, b = before;
    ref.adamw_update(a.params.data(), a.grads.data(), a.m.data(), a.v.data(), c.n, c.hp);
    fast.adamw_update(b.params.data(), b.grads.data(), b.m.data(), b.v.data(), c.n, c.hp);
    const std::string where =
        fmt::format("n={} step={} {} vs {}", c.n, c.hp.step, fast.name, ref.name);
    outcome.check(where + " m", max_error(b.m, a.m), 1e-6);
    outcome.check(where + " v", max_error(b.v, a.v), 1e-6);
    outcome.check(where + " params (relative to the step)",
                  step_error(b.params, a.params, before.params), 1e-5);
  }
}

}  // namespace

OpFamily attention_family() {
  OpFamily f;
  f.name = "attention";
  f.ops = {Op::attention_forward, Op::attention_backward};
  f.tolerances = {
      .forward = 2e-5, .backward = 5e-5, .fd = 1e-3, .fd_step = 1e-2f, .fd_samples = 64};
  f.test_cases = [] {
    return make_cases<AttentionCase, int64_t, int64_t, int64_t, int64_t>(
        // HS = 4, 4, 5, 16, 32, 128, 64 (32, 64, 128 take the fixed-size paths)
        {{1, 1, 4, 1}, {2, 17, 12, 3}, {3, 7, 15, 3}, {2, 64, 64, 4}, {1, 9, 64, 2},
         {2, 6, 128, 1}, {8, 128, 256, 4}});
  };
  f.grad_cases = [] {
    return make_cases<AttentionCase, int64_t, int64_t, int64_t, int64_t>(
        {{1, 1, 4, 1}, {2, 5, 12, 3}, {1, 9, 8, 2}, {2, 17, 15, 3}, {1, 6, 64, 2}, {1, 5, 128, 1},
         {1, 7, 128, 2}});
  };
  return f;
}

OpFamily softmax_xent_family() {
  OpFamily f;
  f.name = "softmax_xent";
  f.ops = {Op::softmax_xent_forward, Op::softmax_xent_backward};
  // fd_step 5e-2: the loss of a row is a float near log(V), so a smaller step drowns
  // the difference in its rounding; the curvature is small enough for this step. For
  // the same reason V stays small in grad mode: at V = 50257 the gradients (~1/V) are
  // below what a float loss of ~10 can resolve; test mode covers that V.
  f.tolerances = {
      .forward = 2e-5, .backward = 2e-5, .fd = 1e-3, .fd_step = 5e-2f, .fd_samples = 64};
  f.test_cases = [] {
    return make_cases<SoftmaxXentCase, int64_t, int64_t, float>(
        {{1, 1, 1.0f}, {7, 61, 1.0f}, {3, 50257, 3.0f}, {64, 1000, 1.0f}, {5, 100, 30.0f}});
  };
  f.grad_cases = [] {
    return make_cases<SoftmaxXentCase, int64_t, int64_t, float>(
        {{1, 1, 1.0f}, {5, 61, 1.0f}, {2, 300, 2.0f}, {4, 127, 3.0f}});
  };
  return f;
}

OpFamily adamw_family() {
  OpFamily f;
  f.name = "adamw";
  f.ops = {Op::adamw_update};
  f.tolerance_note = "checked against a hand-computed update, not gradients";
  f.custom_test = [](const Backend& fast, const Backend& ref, Outcome& outcome) {
    adamw_fast_vs_reference(fast, ref, outcome);
    adamw_against_hand(fast, outcome);
  };
  f.custom_grad = [](const Backend& be, Outcome& outcome) { adamw_against_hand(be, outcome); };
  return f;
}

// Not ops of the table, but part of ops.h: sum_squares (global-norm clipping) and the
// lookup by name. Test mode only (nothing to differentiate).
OpFamily helpers_family() {
  OpFamily f;
  f.name = "reductions";
  f.ops = {Op::sum_squares};
  f.tolerance_note = "sum_squares vs a long-double sum, bit-identical for 1 and 3 threads";
  f.custom_test = [](const Backend&, const Backend&, Outcome& outcome) {
    for (int64_t n : {0, 1, 7, 4097, 100003, 3000017}) {
      Rng rng{uint64_t(n)};
      Floats x(n);
      fill_normal(x, rng, 3.0f);
      long double want = 0.0L;
      for (float v : x) want += (long double)v * v;
      const int threads_before = omp_get_max_threads();
      omp_set_num_threads(1);
      const double one = sum_squares(x.data(), n);
      omp_set_num_threads(3);
      const double three = sum_squares(x.data(), n);
      omp_set_num_threads(threads_before);
      const double err = n == 0 ? std::fabs(one) : std::fabs(double(one - want)) / double(want);
      outcome.check(fmt::format("sum_squares n={} vs long double", n), err, 1e-12);
      outcome.check(fmt::format("sum_squares n={} same bits with 1 and 3 threads", n),
                    one == three ? 0.0 : 1.0, 0.0);
    }
    const bool names_ok = std::string(backend_by_name("cpu").name) == "cpu" &&
                          std::string(backend_by_name("reference").name) == "reference";
    outcome.check("backend_by_name(cpu, reference)", names_ok ? 0.0 : 1.0, 0.0);
    bool threw = false;
    try {
      backend_by_name("cuda-typo");
    } catch (const Error&) {
      threw = true;
    }
    outcome.check("backend_by_name throws Error on an unknown name", threw ? 0.0 : 1.0, 0.0);
  };
  return f;
}

std::vector<OpFamily> all_families() {
  return {matmul_family(),    embedding_family(), layernorm_family(),    gelu_family(),
          attention_family(), residual_family(),  softmax_xent_family(), adamw_family(),
          helpers_family(),   rmsnorm_family(),   rope_family(),         swiglu_family(),
          attention_gqa_family(), fp8_family()};
}

}  // namespace aiscale::ops::testing
