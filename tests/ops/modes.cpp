// The `test` and `grad` modes of test_ops: generic drivers over DiffCase, plus the
// small tensor functions they share.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <set>

#include <fmt/format.h>

#include "aiscale/core/timer.h"
#include "harness.h"

namespace aiscale::ops::testing {

// ---------------------------------------------------------------------------------------
// shared functions

void fill_normal(Floats& x, Rng& rng, float scale) {
  for (float& v : x) v = scale * rng.normal();
}

void fill_uniform(Floats& x, Rng& rng, float low, float high) {
  for (float& v : x) v = low + (high - low) * rng.uniform();
}

void fill_nan(Floats& x) { std::fill(x.begin(), x.end(), std::numeric_limits<float>::quiet_NaN()); }

int64_t first_nonfinite(const Floats& x) {
  for (size_t i = 0; i < x.size(); ++i) {
    if (!std::isfinite(x[i])) return int64_t(i);
  }
  return -1;
}

double rms(const Floats& x) {
  if (x.empty()) return 0.0;
  double sum = 0.0;
  for (float v : x) sum += double(v) * v;
  return std::sqrt(sum / double(x.size()));
}

double max_error(const Floats& got, const Floats& want) {
  if (got.size() != want.size()) return std::numeric_limits<double>::infinity();
  const double scale = rms(want) + std::numeric_limits<float>::min();
  double worst = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i]) || !std::isfinite(want[i])) {
      return std::numeric_limits<double>::infinity();
    }
    const double err = std::fabs(double(got[i]) - want[i]) / (std::fabs(want[i]) + scale);
    worst = std::max(worst, err);
  }
  return worst;
}

void Outcome::check(const std::string& what, double err, double tol) {
  ++checks;
  if (verbose) {
    std::printf("  %-70s err %.3e  tol %.0e  %s\n", what.c_str(), err, tol,
                err <= tol ? "ok" : "FAIL");
  }
  const double inf = std::numeric_limits<double>::infinity();
  const double ratio = tol > 0.0 ? err / tol : (err == 0.0 ? 0.0 : inf);
  if (checks == 1 || !(ratio <= worst_ratio)) {  // also takes NaN
    worst_ratio = std::isnan(ratio) ? inf : ratio;
    worst_what = fmt::format("{}: {:.2e} (tol {:.0e})", what, err, tol);
  }
  if (!(err <= tol)) {
    failures.push_back(fmt::format("{}: error {:.3e} > tolerance {:.1e}", what, err, tol));
  }
}

void Outcome::fail(const std::string& message) {
  ++checks;
  failures.push_back(message);
}

bool selects(const OpFamily& family, const std::string& name) {
  if (name.empty() || name == family.name) return true;
  return std::any_of(family.ops.begin(), family.ops.end(),
                     [&](Op op) { return op_name(op) == name; });
}

namespace {

std::vector<Floats> snapshot(const std::vector<Buf>& bufs) {
  std::vector<Floats> copies;
  for (const Buf& b : bufs) copies.push_back(*b.data);
  return copies;
}

// Every element written: poisoned NaN must be gone.
void check_written(const std::string& what, const Floats& x, Outcome& outcome) {
  const int64_t bad = first_nonfinite(x);
  if (bad >= 0) {
    outcome.fail(fmt::format("{}: element {} of {} is {} (not written, or not finite)", what, bad,
                             x.size(), x[bad]));
  }
}

// Runs the backward with gradients pre-filled: accumulating ones with `accumulate_from`
// (or zeros), overwritten ones with NaN; scratch NaN. Returns the gradients.
std::vector<Floats> run_backward(DiffCase& c, const Backend& backend,
                                 const std::vector<Floats>* accumulate_from) {
  std::vector<GradLink> links = c.grads();
  for (size_t i = 0; i < links.size(); ++i) {
    Floats& g = *links[i].grad;
    if (!links[i].accumulates) {
      fill_nan(g);
    } else if (accumulate_from) {
      g = (*accumulate_from)[i];
    } else {
      std::fill(g.begin(), g.end(), 0.0f);
    }
  }
  for (const Buf& s : c.scratch()) fill_nan(*s.data);
  c.backward(backend);
  std::vector<Floats> result;
  for (const GradLink& l : links) result.push_back(*l.grad);
  return result;
}

// The fast backend must give the same bits whatever the number of OpenMP threads (no
// reduction is split across threads): forward and backward with 1 and with 3 threads.
void check_thread_independence(DiffCase& c, const Backend& fast, Outcome& outcome) {
  const int threads_before = omp_get_max_threads();
  std::vector<std::vector<Floats>> results;
  for (int threads : {1, 3}) {
    omp_set_num_threads(threads);
    std::vector<Buf> outs = c.outputs();
    for (const Buf& b : outs) fill_nan(*b.data);
    c.forward(fast);
    std::vector<Floats> all = snapshot(outs);
    for (Floats& g : run_backward(c, fast, nullptr)) all.push_back(std::move(g));
    results.push_back(std::move(all));
  }
  omp_set_num_threads(threads_before);
  bool same = results[0].size() == results[1].size();
  for (size_t i = 0; same && i < results[0].size(); ++i) {
    same = results[0][i].size() == results[1][i].size() &&
           std::memcmp(results[0][i].data(), results[1][i].data(),
                       results[0][i].size() * sizeof(float)) == 0;
  }
  outcome.check(fmt::format("{} {} same bits with 1 and 3 threads", c.shape(), fast.name),
                same ? 0.0 : 1.0, 0.0);
}

void test_case(DiffCase& c, const Backend& fast, const Backend& ref, const Tolerances& tol,
               uint64_t seed, Outcome& outcome) {
  Rng rng(seed);
  c.init(rng);
  const std::string where = c.shape();

  // forward: reference, then fast, each on poisoned outputs
  std::vector<Buf> outs = c.outputs();
  for (const Buf& b : outs) fill_nan(*b.data);
  c.forward(ref);
  for (const Buf& b : outs) {
    check_written(fmt::format("{} reference {}", where, b.name), *b.data, outcome);
  }
  const std::vector<Floats> ref_outs = snapshot(outs);
  for (const Buf& b : outs) fill_nan(*b.data);
  c.forward(fast);
  for (size_t i = 0; i < outs.size(); ++i) {
    check_written(fmt::format("{} {} {}", where, fast.name, outs[i].name), *outs[i].data, outcome);
    outcome.check(fmt::format("{} forward {}", where, outs[i].name),
                  max_error(*outs[i].data, ref_outs[i]), tol.forward);
  }
  // Both backwards see the reference's saved activations.
  for (size_t i = 0; i < outs.size(); ++i) *outs[i].data = ref_outs[i];

  // backward: accumulating gradients start from random values, the others from NaN
  fill_normal(c.dout(), rng);
  std::vector<GradLink> links = c.grads();
  std::vector<Floats> prefill;
  for (const GradLink& l : links) {
    Floats p(l.grad->size());
    fill_normal(p, rng);
    prefill.push_back(std::move(p));
  }
  const std::vector<Floats> ref_grads = run_backward(c, ref, &prefill);
  const std::vector<Floats> ref_grads_from_zero = run_backward(c, ref, nullptr);
  const std::vector<Floats> fast_grads = run_backward(c, fast, &prefill);
  for (size_t i = 0; i < links.size(); ++i) {
    const std::string name = links[i].name;
    check_written(fmt::format("{} reference {}", where, name), ref_grads[i], outcome);
    check_written(fmt::format("{} {} {}", where, fast.name, name), fast_grads[i], outcome);
    if (links[i].accumulates) {
      // The reference itself must add: from P it gives P + (what it gives from 0).
      Floats expected = ref_grads_from_zero[i];
      for (size_t j = 0; j < expected.size(); ++j) expected[j] += prefill[i][j];
      outcome.check(fmt::format("{} reference {} accumulates (+=)", where, name),
                    max_error(ref_grads[i], expected), std::max(1e-6, tol.backward));
    }
    // The fast path from the same pre-fill: an overwrite where += is due (or the
    // reverse, into NaN) shows up here.
    outcome.check(fmt::format("{} backward {}{}", where, name,
                              links[i].accumulates ? " (+= onto random)" : " (overwrites NaN)"),
                  max_error(fast_grads[i], ref_grads[i]), tol.backward);
  }
  c.extra_checks(fast, ref, outcome);
  check_thread_independence(c, fast, outcome);
}

// loss = sum(out * R), in double.
double loss_of(DiffCase& c, const Backend& backend) {
  c.forward(backend);
  const Floats& out = c.loss_output();
  const Floats& r = c.dout();
  double sum = 0.0;
  for (size_t i = 0; i < out.size(); ++i) sum += double(out[i]) * r[i];
  return sum;
}

void grad_case(DiffCase& c, const Backend& backend, const Tolerances& tol, uint64_t seed,
               Outcome& outcome) {
  Rng rng(seed);
  c.init(rng);
  fill_normal(c.dout(), rng);
  c.forward(backend);
  const std::vector<Floats> analytic = run_backward(c, backend, nullptr);
  std::vector<GradLink> links = c.grads();
  for (size_t i = 0; i < links.size(); ++i) {
    Floats& x = *links[i].input;
    const Floats& g = analytic[i];
    const double g_scale = rms(g) + 1e-12;
    // Sample distinct elements (all of them when the tensor is small).
    std::set<int64_t> picks;
    const int64_t n = int64_t(x.size());
    if (n <= tol.fd_samples) {
      for (int64_t j = 0; j < n; ++j) picks.insert(j);
    } else {
      while (int64_t(picks.size()) < tol.fd_samples) picks.insert(int64_t(rng.below(uint64_t(n))));
    }
    double worst = 0.0;
    int64_t worst_index = -1;
    double worst_fd = 0.0;
    for (int64_t j : picks) {
      const float x0 = x[j];
      const float x_plus = x0 + tol.fd_step, x_minus = x0 - tol.fd_step;
      x[j] = x_plus;
      const double loss_plus = loss_of(c, backend);
      x[j] = x_minus;
      const double loss_minus = loss_of(c, backend);
      x[j] = x0;
      // divide by the step actually taken (x0 +- h rounds in float)
      const double fd = (loss_plus - loss_minus) / (double(x_plus) - double(x_minus));
      const double err = std::fabs(fd - g[j]) / (std::fabs(g[j]) + g_scale);
      if (!(err <= worst)) {
        worst = std::isnan(err) ? std::numeric_limits<double>::infinity() : err;
        worst_index = j;
        worst_fd = fd;
      }
    }
    std::string what = fmt::format("{} {} d{}", c.shape(), backend.name, links[i].name);
    if (worst_index >= 0 && worst > tol.fd) {
      what += fmt::format(" [element {}: backward {:.6g}, finite difference {:.6g}]", worst_index,
                          g[worst_index], worst_fd);
    }
    check_written(what + " (backward output)", g, outcome);
    outcome.check(what, worst, tol.fd);
  }
}

void print_summary(const OpFamily& f, const char* mode, const Outcome& o, int cases,
                   double seconds) {
  std::printf("%s %-13s %-4s %2d cases %4d checks, worst %.2f of tolerance (%s)%s%s [%.2fs]\n",
              o.ok() ? "PASS" : "FAIL", f.name.c_str(), mode, cases, o.checks, o.worst_ratio,
              o.worst_what.c_str(), f.tolerance_note.empty() ? "" : "; ",
              f.tolerance_note.c_str(), seconds);
  for (const std::string& message : o.failures) std::printf("  FAILED %s\n", message.c_str());
  std::fflush(stdout);
}

}  // namespace

int run_test_mode(const std::string& op, bool verbose) {
  const Backend& fast = cpu_backend();
  const Backend& ref = reference_backend();
  int failed = 0, selected = 0;
  for (const OpFamily& f : all_families()) {
    if (!selects(f, op)) continue;
    ++selected;
    Timer timer;
    Outcome outcome;
    outcome.verbose = verbose;
    int cases = 0;
    if (f.custom_test) {
      f.custom_test(fast, ref, outcome);
      cases = 1;
    } else {
      CaseList list = f.test_cases();
      for (size_t i = 0; i < list.size(); ++i) {
        test_case(*list[i], fast, ref, f.tolerances, 1000 + i, outcome);
      }
      cases = int(list.size());
    }
    print_summary(f, "test", outcome, cases, timer.seconds());
    failed += outcome.ok() ? 0 : 1;
  }
  if (selected == 0) {
    std::printf("no op named '%s'\n", op.c_str());
    return 2;
  }
  std::printf("%s: %d of %d op families passed (%s vs %s)\n", failed ? "FAILED" : "OK",
              selected - failed, selected, fast.name, ref.name);
  return failed ? 1 : 0;
}

int run_grad_mode(const std::string& op) {
  int failed = 0, selected = 0, skipped = 0;
  for (const OpFamily& f : all_families()) {
    if (!selects(f, op)) continue;
    if (!f.custom_grad && !f.grad_cases) {
      std::printf("SKIP %-13s grad  (nothing to differentiate)\n", f.name.c_str());
      ++skipped;
      continue;
    }
    ++selected;
    Timer timer;
    Outcome outcome;
    int cases = 0;
    for (const Backend* backend : {&reference_backend(), &cpu_backend()}) {
      if (f.custom_grad) {
        f.custom_grad(*backend, outcome);
        ++cases;
        continue;
      }
      CaseList list = f.grad_cases();
      for (size_t i = 0; i < list.size(); ++i) {
        grad_case(*list[i], *backend, f.tolerances, 2000 + i, outcome);
      }
      cases += int(list.size());
    }
    print_summary(f, "grad", outcome, cases, timer.seconds());
    failed += outcome.ok() ? 0 : 1;
  }
  if (selected + skipped == 0) {
    std::printf("no op named '%s'\n", op.c_str());
    return 2;
  }
  std::printf("%s: %d of %d op families passed (finite differences, reference and cpu)\n",
              failed ? "FAILED" : "OK", selected - failed, selected);
  return failed ? 1 : 0;
}

}  // namespace aiscale::ops::testing
