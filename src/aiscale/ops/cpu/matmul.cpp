// matmul on the CPU: every product goes through OpenBLAS sgemm (row-major views of the
// same buffers, no copies); the bias and its gradient are OpenMP loops.
#include <cblas.h>

#include <climits>
#include <cstring>

#include "aiscale/core/error.h"
#include "aiscale/ops/cpu/kernels.h"
#include "aiscale/ops/cpu/simd.h"

namespace aiscale::ops::cpu {
namespace {

// BLAS takes int dimensions; a GPT's shapes are far below the limit.
int blas_dim(int64_t n) {
  AISCALE_CHECK(n >= 0 && n <= INT_MAX, "matmul dimension {} does not fit BLAS's int", n);
  return static_cast<int>(n);
}

// dbias[o] += sum over n of dout[n, o], for o in [begin, end).
AISCALE_CPU_HOT void add_column_sums(float* dbias, const float* dout, int64_t N, int64_t OC,
                                     int64_t begin, int64_t end) {
  for (int64_t n = 0; n < N; ++n) {
    const float* row = dout + n * OC;
    for (int64_t o = begin; o < end; ++o) dbias[o] += row[o];
  }
}

}  // namespace

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias,
                    int64_t N, int64_t C, int64_t OC) {
  // out (N, OC), inp (N, C), weight (OC, C), bias (OC) or null
  float beta = 0.0f;
  if (bias) {
    // Start from the bias and let sgemm add the product (beta = 1): one pass over out.
#pragma omp parallel for schedule(dynamic, dynamic_chunk(N)) \
    if (worth_threads(N, OC))
    for (int64_t n = 0; n < N; ++n) std::memcpy(out + n * OC, bias, OC * sizeof(float));
    beta = 1.0f;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, blas_dim(N), blas_dim(OC), blas_dim(C),
              1.0f, inp, blas_dim(C), weight, blas_dim(C), beta, out, blas_dim(OC));
}

void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                     const float* inp, const float* weight, int64_t N, int64_t C, int64_t OC) {
  // dinp (N, C) overwritten, dweight (OC, C) +=, dbias (OC) +=, dout (N, OC),
  // inp (N, C), weight (OC, C)
  // dinp = dout @ weight                         (N, OC) x (OC, C)
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, blas_dim(N), blas_dim(C), blas_dim(OC),
              1.0f, dout, blas_dim(OC), weight, blas_dim(C), 0.0f, dinp, blas_dim(C));
  // dweight += dout^T @ inp                      (OC, N) x (N, C)
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, blas_dim(OC), blas_dim(C), blas_dim(N),
              1.0f, dout, blas_dim(OC), inp, blas_dim(C), 1.0f, dweight, blas_dim(C));
  if (dbias) {
    // Split by columns, so each thread owns its slice of dbias and sums rows in order.
    parallel_slices(OC, N, [&](int64_t begin, int64_t end) {
      add_column_sums(dbias, dout, N, OC, begin, end);
    });
  }
}

}  // namespace aiscale::ops::cpu
