// conv2d on the CPU: im2col + OpenBLAS sgemm. A chunk of images is unfolded into one
// column matrix col (C*K*K, nb*OH*OW), so each chunk is one large GEMM with the weights
// (OC, C*K*K) instead of nb small ones; the product (OC, nb*OH*OW) is then scattered into
// NCHW. The chunk is sized so the scratch stays near kScratchCapFloats.
#include <cblas.h>

#include <algorithm>
#include <climits>
#include <cstring>

#include "aiscale/core/error.h"
#include "aiscale/ops/vision/cpu_kernels.h"

namespace aiscale::ops::vision::cpu {
namespace {

constexpr int64_t kScratchCapFloats = int64_t(16) << 20;  // 64 MiB

int blas_dim(int64_t n) {
  AISCALE_CHECK(n >= 0 && n <= INT_MAX, "convolution dimension {} does not fit BLAS's int", n);
  return static_cast<int>(n);
}

int64_t per_image_floats(const ConvShape& s) {
  const int64_t plane = s.OH() * s.OW();
  return s.C * s.K * s.K * plane + s.OC * plane;
}

int64_t chunk_images(const ConvShape& s) {
  return std::clamp<int64_t>(kScratchCapFloats / std::max<int64_t>(per_image_floats(s), 1), 1,
                             std::max<int64_t>(s.N, 1));
}

// The output columns [lo, hi) whose input column ow * stride - pad + kw lies inside [0, W):
// the rest read zero padding.
struct ColumnRange {
  int64_t lo, hi;
};
ColumnRange valid_columns(const ConvShape& s, int64_t kw, int64_t OW) {
  const int64_t shift = s.pad - kw;  // w = ow * stride - shift
  int64_t lo = shift > 0 ? (shift + s.stride - 1) / s.stride : 0;
  int64_t hi = (s.W - 1 + shift) >= 0 ? (s.W - 1 + shift) / s.stride + 1 : 0;
  lo = std::min(lo, OW);
  hi = std::clamp(hi, lo, OW);
  return {lo, hi};
}

// col (C*K*K, nb*P) for images [n0, n0 + nb): row (c, kh, kw), column (image, oh, ow).
void im2col(float* col, const float* inp, const ConvShape& s, int64_t n0, int64_t nb) {
  const int64_t OH = s.OH(), OW = s.OW(), P = OH * OW, cols = nb * P;
  const int64_t rows = s.C * s.K * s.K;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t c = r / (s.K * s.K), kh = (r / s.K) % s.K, kw = r % s.K;
      const ColumnRange cr = valid_columns(s, kw, OW);
      const float* plane = inp + ((n0 + b) * s.C + c) * s.H * s.W;
      float* dst = col + r * cols + b * P;
      for (int64_t oh = 0; oh < OH; ++oh) {
        const int64_t h = oh * s.stride - s.pad + kh;
        float* row = dst + oh * OW;
        if (h < 0 || h >= s.H) {
          std::memset(row, 0, OW * sizeof(float));
          continue;
        }
        const float* src = plane + h * s.W - s.pad + kw;  // src[ow * stride] is column w
        for (int64_t ow = 0; ow < cr.lo; ++ow) row[ow] = 0.0f;
        if (s.stride == 1) {
          std::memcpy(row + cr.lo, src + cr.lo, (cr.hi - cr.lo) * sizeof(float));
        } else {
          for (int64_t ow = cr.lo; ow < cr.hi; ++ow) row[ow] = src[ow * s.stride];
        }
        for (int64_t ow = cr.hi; ow < OW; ++ow) row[ow] = 0.0f;
      }
    }
  }
}

// dinp for images [n0, n0 + nb) = the sum of dcol's entries over the positions they came
// from. One image plane per iteration, so no two threads write the same element.
void col2im(float* dinp, const float* dcol, const ConvShape& s, int64_t n0, int64_t nb) {
  const int64_t OH = s.OH(), OW = s.OW(), P = OH * OW, cols = nb * P;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < nb; ++b) {
    for (int64_t c = 0; c < s.C; ++c) {
      float* plane = dinp + ((n0 + b) * s.C + c) * s.H * s.W;
      std::memset(plane, 0, s.H * s.W * sizeof(float));
      for (int64_t kh = 0; kh < s.K; ++kh) {
        for (int64_t kw = 0; kw < s.K; ++kw) {
          const ColumnRange cr = valid_columns(s, kw, OW);
          const float* src = dcol + ((c * s.K + kh) * s.K + kw) * cols + b * P;
          for (int64_t oh = 0; oh < OH; ++oh) {
            const int64_t h = oh * s.stride - s.pad + kh;
            if (h < 0 || h >= s.H) continue;
            float* dst = plane + h * s.W - s.pad + kw;  // dst[ow * stride] is column w
            const float* row = src + oh * OW;
            if (s.stride == 1) {
#pragma omp simd
              for (int64_t ow = cr.lo; ow < cr.hi; ++ow) dst[ow] += row[ow];
            } else {
              for (int64_t ow = cr.lo; ow < cr.hi; ++ow) dst[ow * s.stride] += row[ow];
            }
          }
        }
      }
    }
  }
}

}  // namespace

int64_t conv2d_scratch_floats(const ConvShape& s) { return chunk_images(s) * per_image_floats(s); }

void conv2d_forward(float* out, const float* inp, const float* weight, const float* bias,
                    const ConvShape& s, float* scratch) {
  const int64_t P = s.OH() * s.OW(), rows = s.C * s.K * s.K, chunk = chunk_images(s);
  for (int64_t n0 = 0; n0 < s.N; n0 += chunk) {
    const int64_t nb = std::min(chunk, s.N - n0);
    float* col = scratch;                 // (C*K*K, nb*P)
    float* prod = scratch + rows * nb * P;  // (OC, nb*P)
    im2col(col, inp, s, n0, nb);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, blas_dim(s.OC), blas_dim(nb * P),
                blas_dim(rows), 1.0f, weight, blas_dim(rows), col, blas_dim(nb * P), 0.0f, prod,
                blas_dim(nb * P));
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t b = 0; b < nb; ++b) {
      for (int64_t o = 0; o < s.OC; ++o) {
        const float* src = prod + o * nb * P + b * P;
        float* dst = out + ((n0 + b) * s.OC + o) * P;
        const float add = bias ? bias[o] : 0.0f;
        for (int64_t p = 0; p < P; ++p) dst[p] = src[p] + add;
      }
    }
  }
}

void conv2d_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                     const float* inp, const float* weight, const ConvShape& s, float* scratch) {
  const int64_t P = s.OH() * s.OW(), rows = s.C * s.K * s.K, chunk = chunk_images(s);
  if (dbias) {
#pragma omp parallel for schedule(static)
    for (int64_t o = 0; o < s.OC; ++o) {
      double acc = 0;
      for (int64_t n = 0; n < s.N; ++n) {
        const float* g = dout + (n * s.OC + o) * P;
        for (int64_t p = 0; p < P; ++p) acc += g[p];
      }
      dbias[o] += float(acc);
    }
  }
  for (int64_t n0 = 0; n0 < s.N; n0 += chunk) {
    const int64_t nb = std::min(chunk, s.N - n0);
    float* col = scratch;                 // (C*K*K, nb*P): the inputs, then their gradient
    float* gathered = scratch + rows * nb * P;  // (OC, nb*P): dout of the chunk
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t b = 0; b < nb; ++b) {
      for (int64_t o = 0; o < s.OC; ++o) {
        std::memcpy(gathered + o * nb * P + b * P, dout + ((n0 + b) * s.OC + o) * P,
                    P * sizeof(float));
      }
    }
    im2col(col, inp, s, n0, nb);
    // dweight (OC, rows) += gathered (OC, nb*P) @ col^T (nb*P, rows)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, blas_dim(s.OC), blas_dim(rows),
                blas_dim(nb * P), 1.0f, gathered, blas_dim(nb * P), col, blas_dim(nb * P), 1.0f,
                dweight, blas_dim(rows));
    if (!dinp) continue;
    // dcol (rows, nb*P) = weight^T (rows, OC) @ gathered (OC, nb*P), into col's space
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, blas_dim(rows), blas_dim(nb * P),
                blas_dim(s.OC), 1.0f, weight, blas_dim(rows), gathered, blas_dim(nb * P), 0.0f,
                col, blas_dim(nb * P));
    col2im(dinp, col, s, n0, nb);
  }
}

}  // namespace aiscale::ops::vision::cpu
