// Functions shared by the fast CPU ops: instruction-set clones for hot loops, a
// vectorisable exp, and splitting work over OpenMP threads.
//
// The default build targets baseline x86-64 (SSE2). Hot row kernels are marked
// AISCALE_CPU_HOT, which makes GCC emit an extra AVX2+FMA (x86-64-v3) copy chosen at
// load time, so an ordinary build still runs wide vectors on current machines.
// Results are deterministic on one machine and independent of the thread count (no op
// splits a reduction across threads), but may differ in the last bits between machines
// with and without AVX2, as they do for OpenBLAS.
#pragma once
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__AVX2__)
#define AISCALE_CPU_HOT __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define AISCALE_CPU_HOT
#endif

namespace aiscale::ops::cpu {

// exp(x) for x <= 0, in float and without branches, so loops calling it vectorise.
// Every caller passes a non-positive argument by construction (softmax's x - max, a
// sigmoid's -|z|); leaving out the overflow side makes this ~40% cheaper than with it.
// Cody-Waite range reduction x = k ln2 + r, |r| <= ln2/2, then a degree-6 polynomial
// for exp(r) (the classic Cephes expf coefficients), then scaling by 2^k through the
// exponent bits. Within 1.01 ulp of exp (measured against double) on [-87.3, 0] (and up
// to 88, but not beyond: 2^k would overflow the exponent bits); returns 0 below -87.3,
// where the true value is subnormal (< 1.2e-38); NaN stays NaN.
[[gnu::always_inline]] inline float exp_nonpositive(float x) {
  constexpr float kLow = -87.33654f;  // ln(2^-126)
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f;  // ln2 = kLn2Hi + kLn2Lo, kLn2Hi exact in 9 bits
  constexpr float kLn2Lo = -2.12194440e-4f;
  constexpr float kRoundMagic = 12582912.0f;  // 1.5 * 2^23: adding it rounds to integer
  const float xc = x < kLow ? kLow : x;
  const float k = (xc * kLog2e + kRoundMagic) - kRoundMagic;
  const float r = (xc - k * kLn2Hi) - k * kLn2Lo;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  const float two_to_k = std::bit_cast<float>((static_cast<int32_t>(k) + 127) << 23);
  return x < kLow ? 0.0f : p * two_to_k;
}

// a . b
[[gnu::always_inline]] inline float dot(const float* a, const float* b, int64_t n) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

// out[j] = a . b_j for four rows b_j at once: four independent accumulators keep the
// FMA units busy (a single dot is one long dependency chain), and a is loaded once.
[[gnu::always_inline]] inline void dot4(float* out, const float* a, const float* b0,
                                        const float* b1, const float* b2, const float* b3,
                                        int64_t n) {
  float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
#pragma omp simd reduction(+ : s0, s1, s2, s3)
  for (int64_t i = 0; i < n; ++i) {
    s0 += a[i] * b0[i];
    s1 += a[i] * b1[i];
    s2 += a[i] * b2[i];
    s3 += a[i] * b3[i];
  }
  out[0] = s0, out[1] = s1, out[2] = s2, out[3] = s3;
}

// out[t2] = a . rows[t2] for t2 in [0, count), rows `stride` floats apart.
[[gnu::always_inline]] inline void dots(float* out, const float* a, const float* rows,
                                        int64_t stride, int64_t count, int64_t n) {
  int64_t j = 0;
  for (; j + 4 <= count; j += 4) {
    const float* r = rows + j * stride;
    dot4(out + j, a, r, r + stride, r + 2 * stride, r + 3 * stride, n);
  }
  for (; j < count; ++j) out[j] = dot(a, rows + j * stride, n);
}

// out[j] = exp(x[j] - m) for j < n (out may be x); returns their sum.
[[gnu::always_inline]] inline float exp_shifted(float* out, const float* x, int64_t n, float m) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < n; ++j) {
    const float e = exp_nonpositive(x[j] - m);
    out[j] = e;
    sum += e;
  }
  return sum;
}

// s[t] = softmax(scale * s)[t] for t < n, in place: the attention's probabilities of one
// query row, the same operations in the same order wherever they are computed.
[[gnu::always_inline]] inline void scaled_softmax(float* s, int64_t n, float scale) {
  float max_score = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : max_score)
  for (int64_t t = 0; t < n; ++t) {
    s[t] *= scale;
    max_score = s[t] > max_score ? s[t] : max_score;
  }
  const float sum = exp_shifted(s, s, n, max_score);
  const float inv_sum = 1.0f / sum;
#pragma omp simd
  for (int64_t t = 0; t < n; ++t) s[t] *= inv_sum;
}

// Below this much work an op runs on one thread. Work is counted roughly in elements
// touched (about a nanosecond each on one core), so the threshold is about half a
// millisecond. On an idle machine a parallel region costs microseconds, but on a busy
// one (more runnable threads than cores) it waits for a descheduled team thread to
// reach its closing barrier: a scheduler time slice, milliseconds. Small ops (the
// target model's layernorms, residuals, embeddings) gain little from two threads and
// risk that, so they stay on one.
inline constexpr int64_t kParallelMinWork = int64_t{1} << 19;

// Work is dealt out dynamically, a few chunks per thread: on a shared machine the OS
// pauses threads at random, and with one static slice each the whole op would wait
// for the slowest. Which thread runs a chunk never changes the result (no reduction
// crosses chunks).
inline constexpr int64_t kChunksPerThread = 4;

// Items per chunk for `#pragma omp parallel for schedule(dynamic, ...)` over `items`.
inline int64_t dynamic_chunk(int64_t items) {
  return std::max<int64_t>(1, items / (kChunksPerThread * omp_get_max_threads()));
}

// Calls fn(begin, end) over [0, n) in chunks spread over the OpenMP threads, or once on
// the whole range when n * work_per_item is small. Chunks are multiples of 16 items so
// vector loops keep whole bodies.
template <class Fn>
void parallel_slices(int64_t n, int64_t work_per_item, Fn&& fn) {
  if (n <= 0) return;
  if (n * work_per_item < kParallelMinWork || omp_get_max_threads() == 1) {
    fn(int64_t{0}, n);
    return;
  }
  const int64_t chunk = (dynamic_chunk(n) + 15) / 16 * 16;
  const int64_t chunks = (n + chunk - 1) / chunk;
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t i = 0; i < chunks; ++i) fn(i * chunk, std::min(n, (i + 1) * chunk));
}

// Whether a loop over `items` of `work_per_item` is worth an OpenMP team (for the
// `if` clause of `#pragma omp parallel for`).
inline bool worth_threads(int64_t items, int64_t work_per_item) {
  return items > 1 && items * work_per_item >= kParallelMinWork;
}

}  // namespace aiscale::ops::cpu
