// test_ops: every op of ops.h, in the spirit of ggml's test-backend-ops.
//   test_ops test [--op NAME]   fast (cpu) backend vs the reference on random inputs
//   test_ops grad [--op NAME]   finite differences vs backward, reference and cpu backends
//   test_ops perf [--op NAME] [--backend cpu|reference] [--min-time S]   JSON per op
// NAME is an op family (matmul, attention, ...) or one op (matmul_backward).
// Exits non-zero when any check fails.
#include <cstdio>
#include <exception>
#include <string>

#include <CLI/CLI.hpp>

#include "harness.h"

int main(int argc, char** argv) {
  using namespace aiscale::ops::testing;
  CLI::App app{"Checks and times every op of aiscale's op table (ops.h)."};
  app.require_subcommand(1);
  std::string op, backend = "cpu";
  double min_seconds = 0.3;
  CLI::App* test = app.add_subcommand("test", "fast backend vs reference, random inputs");
  CLI::App* grad = app.add_subcommand("grad", "finite differences vs backward, both backends");
  CLI::App* perf = app.add_subcommand("perf", "time each op at the target model's shapes (JSON)");
  for (CLI::App* mode : {test, grad, perf}) {
    mode->add_option("--op", op, "only this op family or op (e.g. matmul, attention_backward)");
  }
  perf->add_option("--backend", backend, "backend to time: cpu or reference");
  perf->add_option("--min-time", min_seconds, "seconds to repeat each op for (at least 3 runs)");
  CLI11_PARSE(app, argc, argv);
  try {
    if (test->parsed()) return run_test_mode(op);
    if (grad->parsed()) return run_grad_mode(op);
    return run_perf_mode(op, backend, min_seconds);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "test_ops: %s\n", e.what());
    return 2;
  }
}
