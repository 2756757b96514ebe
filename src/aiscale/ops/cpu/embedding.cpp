// Token + position embedding on the CPU. The backward splits work so that no two
// threads add into the same gradient row: by position for dwpe, by channel slice for
// dwte (tokens repeat, so splitting dwte by token would race).
#include <algorithm>

#include "aiscale/ops/cpu/kernels.h"
#include "aiscale/ops/cpu/simd.h"

namespace aiscale::ops::cpu {
namespace {

AISCALE_CPU_HOT void add_rows(float* out, const float* a, const float* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

AISCALE_CPU_HOT void accumulate_row(float* d, const float* dout, int64_t n) {
  for (int64_t i = 0; i < n; ++i) d[i] += dout[i];
}

}  // namespace

void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                       int64_t B, int64_t T, int64_t C) {
  // out (B, T, C), tokens (B, T), wte (V, C), wpe (maxT, C) or null
  if (!wpe) {
#pragma omp parallel for schedule(dynamic, dynamic_chunk(B * T)) \
    if (worth_threads(B * T, C))
    for (int64_t bt = 0; bt < B * T; ++bt)
      std::copy(wte + int64_t(tokens[bt]) * C, wte + int64_t(tokens[bt]) * C + C, out + bt * C);
    return;
  }
#pragma omp parallel for schedule(dynamic, dynamic_chunk(B * T)) \
    if (worth_threads(B * T, C))
  for (int64_t bt = 0; bt < B * T; ++bt) {
    const int64_t t = bt % T;
    add_rows(out + bt * C, wte + int64_t(tokens[bt]) * C, wpe + t * C, C);
  }
}

void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                        int64_t B, int64_t T, int64_t C) {
  // dwte (V, C) +=, dwpe (maxT, C) += (or null), dout (B, T, C), tokens (B, T)
#pragma omp parallel for schedule(dynamic, dynamic_chunk(T)) \
    if (dwpe && worth_threads(T, B * C))
  for (int64_t t = 0; t < T; ++t) {
    if (!dwpe) continue;
    for (int64_t b = 0; b < B; ++b) accumulate_row(dwpe + t * C, dout + (b * T + t) * C, C);
  }
  parallel_slices(C, B * T, [&](int64_t begin, int64_t end) {
    for (int64_t bt = 0; bt < B * T; ++bt) {
      accumulate_row(dwte + int64_t(tokens[bt]) * C + begin, dout + bt * C + begin, end - begin);
    }
  });
}

}  // namespace aiscale::ops::cpu
