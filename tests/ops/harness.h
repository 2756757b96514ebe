// test_ops harness: one "case" is one op family (forward + backward) at one shape.
// Host backends here; the CUDA backend's cases in cuda/ (cuda_harness.h).
// The generic drivers in modes.cpp run every case the same way:
//   test: fast backend vs reference on random inputs, outputs poisoned with NaN first,
//         gradient conventions (accumulate vs overwrite) checked on pre-filled buffers;
//   grad: central finite differences of loss = sum(out * R) against the backward.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "aiscale/core/rng.h"
#include "aiscale/ops/ops.h"

namespace aiscale::ops::testing {

using Floats = std::vector<float>;

void fill_normal(Floats& x, Rng& rng, float scale = 1.0f);
void fill_uniform(Floats& x, Rng& rng, float low, float high);
void fill_nan(Floats& x);
// Index of the first NaN or Inf, or -1.
int64_t first_nonfinite(const Floats& x);
double rms(const Floats& x);
// Scale-free error of `got` against `want`: the largest |got - want| / (|want| + rms(want)),
// i.e. relative for large elements and relative to the tensor's typical size for small ones.
// Infinite when any element is NaN/Inf or sizes differ.
double max_error(const Floats& got, const Floats& want);

// Collects the checks of one op: the worst error seen against its tolerance, and
// every failure message.
struct Outcome {
  bool verbose = false;  // print every check as it is made
  int checks = 0;
  double worst_ratio = 0.0;  // max of error / tolerance over all checks
  std::string worst_what;
  std::vector<std::string> failures;
  // Records err against tol; a failure when err > tol (or err is NaN).
  void check(const std::string& what, double err, double tol);
  void fail(const std::string& message);
  bool ok() const { return failures.empty(); }
};

// A float tensor of a case, by name.
struct Buf {
  std::string name;
  Floats* data;
};

// An input with a gradient. `accumulates`: the backward adds into the gradient
// (parameter gradients, layernorm's dinp, residual's); otherwise it overwrites it.
struct GradLink {
  std::string name;
  Floats* input;
  Floats* grad;
  bool accumulates;
};

// One op family at one shape.
class DiffCase {
 public:
  virtual ~DiffCase() = default;
  virtual std::string shape() const = 0;
  // Allocates every buffer and fills the inputs (random, from rng).
  virtual void init(Rng& rng) = 0;
  // Every forward output (saved activations included); poisoned before each forward.
  virtual std::vector<Buf> outputs() = 0;
  virtual void forward(const Backend& backend) = 0;
  // The output the loss sum(out * R) is taken over, and R (the backward's dout).
  virtual Floats& loss_output() = 0;
  virtual Floats& dout() = 0;
  // Scratch the backward may use (poisoned before each backward).
  virtual std::vector<Buf> scratch() { return {}; }
  virtual std::vector<GradLink> grads() = 0;
  virtual void backward(const Backend& backend) = 0;
  // Op-specific checks of the fast backend (in-place variants); state is as init left it.
  virtual void extra_checks(const Backend& fast, const Backend& reference, Outcome& outcome) {
    (void)fast, (void)reference, (void)outcome;
  }
};

struct Tolerances {
  double forward = 1e-5;   // fast vs reference, max_error of each output
  double backward = 1e-5;  // fast vs reference, max_error of each gradient
  double fd = 1e-2;        // finite differences vs backward, per sampled element
  float fd_step = 1e-2f;   // central-difference step
  int fd_samples = 24;     // elements sampled per gradient tensor
};

using CaseList = std::vector<std::unique_ptr<DiffCase>>;

// One case of type T per tuple of constructor arguments.
template <class T, class... Args>
CaseList make_cases(std::initializer_list<std::tuple<Args...>> shapes) {
  CaseList list;
  for (const auto& s : shapes) {
    list.push_back(std::apply([](auto... a) { return std::make_unique<T>(a...); }, s));
  }
  return list;
}

struct OpFamily {
  std::string name;     // "matmul"; --op accepts it or any of `ops`
  std::vector<Op> ops;  // {Op::matmul_forward, Op::matmul_backward}
  Tolerances tolerances;
  std::function<CaseList()> test_cases;  // typical and odd shapes
  std::function<CaseList()> grad_cases;  // small shapes, for finite differences
  // Families without forward/backward (AdamW) check themselves instead.
  std::function<void(const Backend& fast, const Backend& reference, Outcome&)> custom_test;
  std::function<void(const Backend& backend, Outcome&)> custom_grad;
  std::string tolerance_note;  // printed in the summary
};

// Every op family of ops.h (cases_*.cpp).
std::vector<OpFamily> all_families();
OpFamily matmul_family();
OpFamily embedding_family();
OpFamily layernorm_family();
OpFamily gelu_family();
OpFamily attention_family();
OpFamily residual_family();
OpFamily softmax_xent_family();
OpFamily adamw_family();
OpFamily helpers_family();
OpFamily rmsnorm_family();
OpFamily rope_family();
OpFamily swiglu_family();
OpFamily attention_gqa_family();
OpFamily fp8_family();

// Whether --op NAME selects this family (empty NAME selects all).
bool selects(const OpFamily& family, const std::string& name);

// Modes; each returns the process exit status.
int run_test_mode(const std::string& op, bool verbose);
int run_grad_mode(const std::string& op);
int run_perf_mode(const std::string& op, const std::string& backend, double min_seconds);
// Every op of the vocabulary against every backend's coverage table and the harness's
// families: prints the table; fails where a backend implements an op that no family checks
// or a host-table op has no entry.
int run_coverage_mode();

}  // namespace aiscale::ops::testing
