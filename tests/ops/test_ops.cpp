// test_ops: every op of the vocabulary (ops/op.h) on every backend, in the spirit of
// ggml's test-backend-ops.
//   test_ops test [--backend cpu|cuda|all] [--op NAME] [--dtype fp32|bf16|fp16] [--verbose]
//       cpu: the fast host backend vs the reference on random inputs (fp32);
//       cuda: every CUDA op vs the reference in fp32, bf16, fp16 (fused epilogues, the
//       attention kernels), then the CUDA GPT model vs the CPU model (--op gpt_model), the
//       llama family's ops (--op llama_ops) and its CUDA model against a double-precision
//       host model (--op llama_model);
//       all (default): cpu, then cuda where this build has it and a GPU is visible.
//   test_ops grad [--op NAME]   finite differences vs backward, reference and cpu backends
//   test_ops perf [--backend cpu|reference|cuda] [--op NAME] [--min-time S] [--profile]
//       cpu / reference: JSON per op at the CPU target model's shapes; cuda: a table of
//       every CUDA op at GPT-2 124M and 350M shapes (--profile: each hot kernel once, ncu)
//   test_ops coverage   the vocabulary against every backend's table and the harness
// NAME is an op family (matmul, attention, ...) or one op (matmul_backward).
// Exit status: 0 passed, 1 a check failed, 2 bad arguments, 77 cuda asked for but no GPU
// visible or not built (ctest: skipped).
#include <cstdio>
#include <exception>
#include <string>

#include <CLI/CLI.hpp>

#include "harness.h"
#if AISCALE_TEST_OPS_CUDA
#include "cuda/cuda_harness.h"
#endif

#if !AISCALE_TEST_OPS_CUDA
namespace {

int cuda_not_built() {
  std::printf("SKIP cuda: this build has no CUDA backend (configure with the cuda preset)\n");
  return 77;  // ctest: skipped
}

}  // namespace
#endif

int main(int argc, char** argv) {
  using namespace aiscale::ops::testing;
  CLI::App app{"Checks and times every op of aiscale's op vocabulary on every backend."};
  app.require_subcommand(1);
  std::string op, backend, dtype;
  double min_seconds = 0.3;
  bool verbose = false, profile = false;
  CLI::App* test = app.add_subcommand("test", "every backend vs the reference, random inputs");
  CLI::App* grad = app.add_subcommand("grad", "finite differences vs backward, host backends");
  CLI::App* perf = app.add_subcommand("perf", "time each op at a target model's shapes");
  CLI::App* coverage = app.add_subcommand("coverage", "ops x backends x harness families");
  for (CLI::App* mode : {test, grad, perf}) {
    mode->add_option("--op", op, "only this op family or op (e.g. matmul, attention_backward)");
  }
  test->add_option("--backend", backend, "cpu, cuda or all (default)")
      ->check(CLI::IsMember({"cpu", "cuda", "all"}));
  test->add_option("--dtype", dtype, "cuda: only this dtype (fp32, bf16, fp16)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  test->add_flag("--verbose", verbose, "print every check");
  perf->add_option("--backend", backend, "cpu (default), reference or cuda")
      ->check(CLI::IsMember({"cpu", "reference", "cuda"}));
  perf->add_option("--min-time", min_seconds, "host: seconds to repeat each op for (at least 3 runs)");
  perf->add_flag("--profile", profile, "cuda: run each hot kernel once (for ncu)");
  CLI11_PARSE(app, argc, argv);
  try {
    if (coverage->parsed()) return run_coverage_mode();
    if (grad->parsed()) return run_grad_mode(op);
    if (perf->parsed()) {
      if (backend != "cuda") return run_perf_mode(op, backend.empty() ? "cpu" : backend, min_seconds);
#if AISCALE_TEST_OPS_CUDA
      return run_cuda_perf_mode(op, profile);
#else
      return cuda_not_built();
#endif
    }
    if (backend == "cpu") return run_test_mode(op, verbose);
#if AISCALE_TEST_OPS_CUDA
    if (backend == "cuda") return run_cuda_test_mode(op, dtype, verbose);
    // Both backends; an --op that only one of them has is not an error.
    const int host = run_test_mode(op, verbose);
    const int device = run_cuda_test_mode(op, dtype, verbose);
    if (host == 2) return device;
    if (host == 1 || device == 1) return 1;
    return 0;
#else
    if (backend == "cuda") return cuda_not_built();
    const int host = run_test_mode(op, verbose);
    std::printf("SKIP cuda: this build has no CUDA backend\n");
    return host;
#endif
  } catch (const std::exception& e) {
    std::fprintf(stderr, "test_ops: %s\n", e.what());
    return 2;
  }
}
