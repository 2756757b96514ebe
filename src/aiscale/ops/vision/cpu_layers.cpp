// The vision ops other than convolution on the CPU: OpenMP loops over channels (batch
// norm's reductions, so each thread sums whole channels in a fixed order: deterministic
// for a given thread count and shape) or over (image, channel) planes and rows.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "aiscale/ops/vision/cpu_kernels.h"

namespace aiscale::ops::vision::cpu {

void batchnorm_stats(double* sum, double* sumsq, const float* inp, int64_t N, int64_t C,
                     int64_t HW) {
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < C; ++c) {
    double s = 0, q = 0;
    for (int64_t n = 0; n < N; ++n) {
      const float* x = inp + (n * C + c) * HW;
      float ps = 0, pq = 0;  // one plane in float (vectorised), planes summed in double
#pragma omp simd reduction(+ : ps, pq)
      for (int64_t i = 0; i < HW; ++i) {
        ps += x[i];
        pq += x[i] * x[i];
      }
      s += ps;
      q += pq;
    }
    sum[c] = s;
    sumsq[c] = q;
  }
}

void batchnorm_forward(float* out, const float* inp, const float* mean, const float* rstd,
                       const float* gamma, const float* beta, int64_t N, int64_t C,
                       int64_t HW) {
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t c = 0; c < C; ++c) {
      const float scale = rstd[c] * gamma[c], shift = beta[c] - mean[c] * scale;
      const float* x = inp + (n * C + c) * HW;
      float* y = out + (n * C + c) * HW;
#pragma omp simd
      for (int64_t i = 0; i < HW; ++i) y[i] = x[i] * scale + shift;
    }
  }
}

void batchnorm_backward_reduce(double* sum_dy, double* sum_dy_xhat, const float* dout,
                               const float* inp, const float* mean, const float* rstd,
                               int64_t N, int64_t C, int64_t HW) {
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < C; ++c) {
    double a = 0, b = 0;
    const float m = mean[c];
    for (int64_t n = 0; n < N; ++n) {
      const float* g = dout + (n * C + c) * HW;
      const float* x = inp + (n * C + c) * HW;
      float pa = 0, pb = 0;
#pragma omp simd reduction(+ : pa, pb)
      for (int64_t i = 0; i < HW; ++i) {
        pa += g[i];
        pb += g[i] * (x[i] - m);
      }
      a += pa;
      b += pb;
    }
    sum_dy[c] = a;
    sum_dy_xhat[c] = b * rstd[c];
  }
}

void batchnorm_backward(float* dinp, const float* dout, const float* inp, const float* mean,
                        const float* rstd, const float* gamma, const double* sum_dy,
                        const double* sum_dy_xhat, double count, int64_t N, int64_t C,
                        int64_t HW) {
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t c = 0; c < C; ++c) {
      const float k = gamma[c] * rstd[c];
      const float mean_dy = float(sum_dy[c] / count);
      const float mean_dy_xhat = float(sum_dy_xhat[c] / count);
      const float m = mean[c], r = rstd[c];
      const float* g = dout + (n * C + c) * HW;
      const float* x = inp + (n * C + c) * HW;
      float* d = dinp + (n * C + c) * HW;
#pragma omp simd
      for (int64_t i = 0; i < HW; ++i) d[i] = k * (g[i] - mean_dy - (x[i] - m) * r * mean_dy_xhat);
    }
  }
}

void relu_forward(float* out, const float* inp, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
}

void relu_backward(float* dinp, const float* out, const float* dout, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) dinp[i] = out[i] > 0.0f ? dout[i] : 0.0f;
}

void maxpool_forward(float* out, int32_t* argmax, const float* inp, const PoolShape& s) {
  const int64_t OH = s.OH(), OW = s.OW();
#pragma omp parallel for schedule(static)
  for (int64_t nc = 0; nc < s.N * s.C; ++nc) {
    const float* plane = inp + nc * s.H * s.W;
    for (int64_t oh = 0; oh < OH; ++oh) {
      const int64_t h0 = std::max<int64_t>(oh * s.stride - s.pad, 0);
      const int64_t h1 = std::min<int64_t>(oh * s.stride - s.pad + s.K, s.H);
      for (int64_t ow = 0; ow < OW; ++ow) {
        const int64_t w0 = std::max<int64_t>(ow * s.stride - s.pad, 0);
        const int64_t w1 = std::min<int64_t>(ow * s.stride - s.pad + s.K, s.W);
        int64_t where = h0 * s.W + w0;
        float best = plane[where];
        for (int64_t h = h0; h < h1; ++h) {
          for (int64_t w = w0; w < w1; ++w) {
            if (plane[h * s.W + w] > best) {
              best = plane[h * s.W + w];
              where = h * s.W + w;
            }
          }
        }
        out[(nc * OH + oh) * OW + ow] = best;
        argmax[(nc * OH + oh) * OW + ow] = int32_t(where);
      }
    }
  }
}

void maxpool_backward(float* dinp, const float* dout, const int32_t* argmax, const PoolShape& s) {
  const int64_t plane_out = s.OH() * s.OW(), plane_in = s.H * s.W;
#pragma omp parallel for schedule(static)
  for (int64_t nc = 0; nc < s.N * s.C; ++nc) {
    float* d = dinp + nc * plane_in;
    std::memset(d, 0, plane_in * sizeof(float));
    for (int64_t i = 0; i < plane_out; ++i) d[argmax[nc * plane_out + i]] += dout[nc * plane_out + i];
  }
}

void avgpool_forward(float* out, const float* inp, int64_t N, int64_t C, int64_t HW) {
#pragma omp parallel for schedule(static)
  for (int64_t nc = 0; nc < N * C; ++nc) {
    const float* x = inp + nc * HW;
    double acc = 0;
    for (int64_t i = 0; i < HW; ++i) acc += x[i];
    out[nc] = float(acc / double(HW));
  }
}

void avgpool_backward(float* dinp, const float* dout, int64_t N, int64_t C, int64_t HW) {
  const float inv = 1.0f / float(HW);
#pragma omp parallel for schedule(static)
  for (int64_t nc = 0; nc < N * C; ++nc) {
    const float g = dout[nc] * inv;
    std::fill(dinp + nc * HW, dinp + (nc + 1) * HW, g);
  }
}

void xent_smooth_forward(float* losses, const float* logits, const int32_t* targets, int64_t N,
                         int64_t V, float smoothing) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const float* row = logits + i * V;
    float maxv = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < V; ++j) maxv = std::max(maxv, row[j]);
    double z = 0, sum = 0;
    for (int64_t j = 0; j < V; ++j) {
      z += std::exp(double(row[j] - maxv));
      sum += row[j];
    }
    const double logz = std::log(z) + maxv;
    // -sum_j q_j (x_j - logz) = logz - (1 - eps) x_t - eps/V sum_j x_j
    losses[i] = float(logz - (1.0 - smoothing) * row[targets[i]] - double(smoothing) / V * sum);
  }
}

void xent_smooth_backward(float* dlogits, const float* logits, const int32_t* targets,
                          const float* dlosses, int64_t N, int64_t V, float smoothing) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const float* row = logits + i * V;
    float* d = dlogits + i * V;
    float maxv = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < V; ++j) maxv = std::max(maxv, row[j]);
    double z = 0;
    for (int64_t j = 0; j < V; ++j) z += std::exp(double(row[j] - maxv));
    const float inv_z = float(1.0 / z), scale = dlosses[i];
    const float off = smoothing / float(V), on = 1.0f - smoothing + off;
    const int64_t t = targets[i];
    for (int64_t j = 0; j < V; ++j) {
      const float p = std::exp(row[j] - maxv) * inv_z;
      d[j] = scale * (p - (j == t ? on : off));
    }
  }
}

}  // namespace aiscale::ops::vision::cpu
