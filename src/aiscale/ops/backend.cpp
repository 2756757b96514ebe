// Backend lookup by name, and the functions shared by every backend's callers.
#include <string>

#include "aiscale/core/error.h"
#include "aiscale/ops/cpu/simd.h"
#include "aiscale/ops/ops.h"

namespace aiscale::ops {

const Backend& backend_by_name(std::string_view name) {
  if (name == "reference") return reference_backend();
  if (name == "cpu") return cpu_backend();
  fail("unknown ops backend '{}': use 'cpu' (fast) or 'reference' (plain loops)", name);
}

namespace {

AISCALE_CPU_HOT double sum_squares_slice(const float* x, int64_t n) {
  double sum = 0.0;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < n; ++i) sum += double(x[i]) * x[i];
  return sum;
}

}  // namespace

AttentionHeads attention_heads(int64_t C, int64_t NH, int64_t NKV) {
  AISCALE_CHECK(NH > 0 && C % NH == 0, "attention: C = {} is not a multiple of NH = {}", C, NH);
  AISCALE_CHECK(NKV > 0 && NH % NKV == 0, "attention: NH = {} is not a multiple of NKV = {}", NH,
                NKV);
  const int64_t HS = C / NH, KC = NKV * HS;
  return {HS, KC, C + 2 * KC, NH / NKV};
}

double sum_squares(const float* x, int64_t n) {
  // Fixed blocks, summed in block order: the result does not depend on the number of
  // threads (global-norm clipping must be bit-for-bit reproducible).
  constexpr int64_t kBlocks = 64;
  const int64_t block = std::max<int64_t>(4096, (n + kBlocks - 1) / kBlocks);
  const int64_t blocks = (n + block - 1) / block;
  double partial[kBlocks] = {};
#pragma omp parallel for schedule(dynamic, 1) if (blocks > 1)
  for (int64_t i = 0; i < blocks; ++i) {
    const int64_t begin = i * block;
    partial[i] = sum_squares_slice(x + begin, std::min(block, n - begin));
  }
  double total = 0.0;
  for (int64_t i = 0; i < blocks; ++i) total += partial[i];
  return total;
}

}  // namespace aiscale::ops
