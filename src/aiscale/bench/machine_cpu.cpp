#include "aiscale/bench/machine_cpu.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <vector>

#include "aiscale/core/error.h"
#include "aiscale/core/stats.h"

namespace aiscale::bench::cpu {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

int blas_int(int64_t v) {
  if (v <= 0 || v > INT_MAX) fail("GEMM dimension {} is out of BLAS's range", v);
  return static_cast<int>(v);
}

// Deterministic values in [-1, 1): no zeros or denormals to flatter the timing.
template <typename T>
std::vector<T> values(int64_t n, uint32_t seed) {
  std::vector<T> v(static_cast<size_t>(n));
  uint32_t x = seed * 2654435761u + 1;
  for (auto& e : v) {
    x = x * 1664525u + 1013904223u;
    e = static_cast<T>(static_cast<double>(x >> 8) / double(1u << 23) - 1.0);
  }
  return v;
}

template <typename T, typename Gemm>
double time_gemm(const GemmShape& s, int repeats, const Gemm& gemm) {
  const std::vector<T> a = values<T>(s.m * s.k, 1), b = values<T>(s.k * s.n, 2);
  std::vector<T> c(static_cast<size_t>(s.m * s.n));
  const int lda = blas_int(s.trans_a ? s.m : s.k), ldb = blas_int(s.trans_b ? s.k : s.n);
  auto call = [&] {
    gemm(CblasRowMajor, s.trans_a ? CblasTrans : CblasNoTrans, s.trans_b ? CblasTrans : CblasNoTrans,
         blas_int(s.m), blas_int(s.n), blas_int(s.k), T(1), a.data(), lda, b.data(), ldb, T(0),
         c.data(), blas_int(s.n));
  };
  auto t0 = Clock::now();
  call();  // warm-up: thread pool start, page faults
  const double probe = seconds_since(t0);
  const int iters = static_cast<int>(std::clamp(std::ceil(2e-3 / std::max(probe, 1e-7)), 1.0, 1000.0));
  std::vector<double> t;
  for (int r = 0; r < std::max(1, repeats); ++r) {
    t0 = Clock::now();
    for (int i = 0; i < iters; ++i) call();
    t.push_back(seconds_since(t0) / iters);
  }
  return median(t);
}

}  // namespace

double gemm_seconds(const std::string& precision, const GemmShape& s, int repeats) {
  if (precision == "fp32") return time_gemm<float>(s, repeats, cblas_sgemm);
  if (precision == "fp64") return time_gemm<double>(s, repeats, cblas_dgemm);
  fail("CPU GEMMs run in fp32 or fp64, not '{}'", precision);
}

HostBandwidth host_bandwidth(int64_t bytes_per_array, int repeats) {
  const int64_t n = std::max<int64_t>(1024, bytes_per_array / 8);
  // First touch by the threads that use them: pages land on those threads' NUMA nodes.
  std::vector<double> a(static_cast<size_t>(n)), b(static_cast<size_t>(n)), c(static_cast<size_t>(n));
  double* pa = a.data();
  double* pb = b.data();
  double* pc = c.data();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    pa[i] = 1.0;
    pb[i] = 2.0;
    pc[i] = 0.5;
  }
  auto run = [&](auto&& body) {
    std::vector<double> t;
    for (int r = 0; r < std::max(1, repeats) + 1; ++r) {  // the first is a warm-up
      const auto t0 = Clock::now();
      body();
      if (r > 0) t.push_back(seconds_since(t0));
    }
    return median(t);
  };
  const double copy_s = run([&] {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) pb[i] = pa[i];
  });
  const double triad_s = run([&] {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) pa[i] = pb[i] + 0.5 * pc[i];
  });
  // Keep the results observable so the loops are not optimised away.
  volatile double sink = pa[n / 2] + pb[n / 3];
  (void)sink;
  const double bytes = 8.0 * double(n);
  return {2.0 * bytes / copy_s / 1e9, 3.0 * bytes / triad_s / 1e9};
}

}  // namespace aiscale::bench::cpu
