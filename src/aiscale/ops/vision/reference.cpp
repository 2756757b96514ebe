// The vision ops' definitions: plain loops, one output element at a time, in the order
// the math reads. Slow on purpose; the fast CPU path (cpu_*.cpp) is checked against these.
#include <algorithm>
#include <cmath>
#include <limits>

#include "aiscale/ops/vision/vision_ops.h"

namespace aiscale::ops::vision {
namespace {

// f(n, o, oh, ow) for every output element of a convolution, in memory order.
template <typename F>
void for_each_conv_output(const ConvShape& s, F f) {
  const int64_t OH = s.OH(), OW = s.OW();
  for (int64_t n = 0; n < s.N; ++n)
    for (int64_t o = 0; o < s.OC; ++o)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) f(n, o, oh, ow, ((n * s.OC + o) * OH + oh) * OW + ow);
}

// f(kh, kw, h, w) for every position (h, w) of the K x K window of output (oh, ow) of a
// convolution or pool shape, by kernel row, then column; padding skipped.
template <typename Shape, typename F>
void for_each_in_window(const Shape& s, int64_t oh, int64_t ow, F f) {
  for (int64_t kh = 0; kh < s.K; ++kh) {
    const int64_t h = oh * s.stride - s.pad + kh;
    if (h < 0 || h >= s.H) continue;
    for (int64_t kw = 0; kw < s.K; ++kw) {
      const int64_t w = ow * s.stride - s.pad + kw;
      if (w < 0 || w >= s.W) continue;
      f(kh, kw, h, w);
    }
  }
}

// f(i, k) for every input element i that output (n, o, oh, ow) reads, with the index k of
// its weight: by input channel, then kernel row, then kernel column; padding skipped.
template <typename F>
void for_each_tap(const ConvShape& s, int64_t n, int64_t o, int64_t oh, int64_t ow, F f) {
  for (int64_t c = 0; c < s.C; ++c) {
    for_each_in_window(s, oh, ow, [&](int64_t kh, int64_t kw, int64_t h, int64_t w) {
      f(((n * s.C + c) * s.H + h) * s.W + w, ((o * s.C + c) * s.K + kh) * s.K + kw);
    });
  }
}

void conv2d_forward(float* out, const float* inp, const float* weight, const float* bias,
                    const ConvShape& s, float* /*scratch*/) {
  for_each_conv_output(s, [&](int64_t n, int64_t o, int64_t oh, int64_t ow, int64_t at) {
    double acc = bias ? bias[o] : 0.0;
    for_each_tap(s, n, o, oh, ow,
                 [&](int64_t i, int64_t k) { acc += double(inp[i]) * weight[k]; });
    out[at] = float(acc);
  });
}

void conv2d_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                     const float* inp, const float* weight, const ConvShape& s,
                     float* /*scratch*/) {
  if (dinp) std::fill(dinp, dinp + s.in_size(), 0.0f);
  for_each_conv_output(s, [&](int64_t n, int64_t o, int64_t oh, int64_t ow, int64_t at) {
    const float g = dout[at];
    if (dbias) dbias[o] += g;
    for_each_tap(s, n, o, oh, ow, [&](int64_t i, int64_t k) {
      dweight[k] += g * inp[i];
      if (dinp) dinp[i] += g * weight[k];
    });
  });
}

void batchnorm_stats(double* sum, double* sumsq, const float* inp, int64_t N, int64_t C,
                     int64_t HW) {
  for (int64_t c = 0; c < C; ++c) {
    double s = 0, q = 0;
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t i = 0; i < HW; ++i) {
        const double x = inp[(n * C + c) * HW + i];
        s += x;
        q += x * x;
      }
    }
    sum[c] = s;
    sumsq[c] = q;
  }
}

void batchnorm_forward(float* out, const float* inp, const float* mean, const float* rstd,
                       const float* gamma, const float* beta, int64_t N, int64_t C, int64_t HW) {
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t c = 0; c < C; ++c) {
      for (int64_t i = 0; i < HW; ++i) {
        const int64_t k = (n * C + c) * HW + i;
        out[k] = (inp[k] - mean[c]) * rstd[c] * gamma[c] + beta[c];
      }
    }
  }
}

void batchnorm_backward_reduce(double* sum_dy, double* sum_dy_xhat, const float* dout,
                               const float* inp, const float* mean, const float* rstd,
                               int64_t N, int64_t C, int64_t HW) {
  for (int64_t c = 0; c < C; ++c) {
    double a = 0, b = 0;
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t i = 0; i < HW; ++i) {
        const int64_t k = (n * C + c) * HW + i;
        a += dout[k];
        b += double(dout[k]) * (inp[k] - mean[c]) * rstd[c];
      }
    }
    sum_dy[c] = a;
    sum_dy_xhat[c] = b;
  }
}

void batchnorm_backward(float* dinp, const float* dout, const float* inp, const float* mean,
                        const float* rstd, const float* gamma, const double* sum_dy,
                        const double* sum_dy_xhat, double count, int64_t N, int64_t C,
                        int64_t HW) {
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t c = 0; c < C; ++c) {
      for (int64_t i = 0; i < HW; ++i) {
        const int64_t k = (n * C + c) * HW + i;
        const double xhat = double(inp[k] - mean[c]) * rstd[c];
        dinp[k] = float(double(gamma[c]) * rstd[c] *
                        (dout[k] - sum_dy[c] / count - xhat * sum_dy_xhat[c] / count));
      }
    }
  }
}

void relu_forward(float* out, const float* inp, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
}

void relu_backward(float* dinp, const float* out, const float* dout, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dinp[i] = out[i] > 0.0f ? dout[i] : 0.0f;
}

void maxpool_forward(float* out, int32_t* argmax, const float* inp, const PoolShape& s) {
  const int64_t OH = s.OH(), OW = s.OW();
  for (int64_t nc = 0; nc < s.N * s.C; ++nc) {
    const float* plane = inp + nc * s.H * s.W;
    for (int64_t oh = 0; oh < OH; ++oh) {
      for (int64_t ow = 0; ow < OW; ++ow) {
        float best = -std::numeric_limits<float>::infinity();
        int32_t where = -1;
        for_each_in_window(s, oh, ow, [&](int64_t, int64_t, int64_t h, int64_t w) {
          if (where < 0 || plane[h * s.W + w] > best) {
            best = plane[h * s.W + w];
            where = int32_t(h * s.W + w);
          }
        });
        out[(nc * OH + oh) * OW + ow] = best;
        argmax[(nc * OH + oh) * OW + ow] = where;
      }
    }
  }
}

void maxpool_backward(float* dinp, const float* dout, const int32_t* argmax, const PoolShape& s) {
  const int64_t plane_out = s.OH() * s.OW(), plane_in = s.H * s.W;
  std::fill(dinp, dinp + s.in_size(), 0.0f);
  for (int64_t nc = 0; nc < s.N * s.C; ++nc) {
    for (int64_t i = 0; i < plane_out; ++i) {
      dinp[nc * plane_in + argmax[nc * plane_out + i]] += dout[nc * plane_out + i];
    }
  }
}

void avgpool_forward(float* out, const float* inp, int64_t N, int64_t C, int64_t HW) {
  for (int64_t nc = 0; nc < N * C; ++nc) {
    double acc = 0;
    for (int64_t i = 0; i < HW; ++i) acc += inp[nc * HW + i];
    out[nc] = float(acc / double(HW));
  }
}

void avgpool_backward(float* dinp, const float* dout, int64_t N, int64_t C, int64_t HW) {
  for (int64_t nc = 0; nc < N * C; ++nc) {
    for (int64_t i = 0; i < HW; ++i) dinp[nc * HW + i] = dout[nc] / float(HW);
  }
}

// The largest logit of a row and the sum of exp(logit - largest).
void row_max_and_sum(const float* row, int64_t V, double& maxv, double& z) {
  maxv = row[0];
  for (int64_t j = 1; j < V; ++j) maxv = std::max<double>(maxv, row[j]);
  z = 0;
  for (int64_t j = 0; j < V; ++j) z += std::exp(row[j] - maxv);
}

void xent_smooth_forward(float* losses, const float* logits, const int32_t* targets, int64_t N,
                         int64_t V, float smoothing) {
  for (int64_t i = 0; i < N; ++i) {
    const float* row = logits + i * V;
    double maxv, z;
    row_max_and_sum(row, V, maxv, z);
    const double logz = std::log(z) + maxv;
    double loss = 0;
    for (int64_t j = 0; j < V; ++j) {
      const double q = (j == targets[i] ? 1.0 - smoothing : 0.0) + double(smoothing) / V;
      loss -= q * (row[j] - logz);
    }
    losses[i] = float(loss);
  }
}

void xent_smooth_backward(float* dlogits, const float* logits, const int32_t* targets,
                          const float* dlosses, int64_t N, int64_t V, float smoothing) {
  for (int64_t i = 0; i < N; ++i) {
    const float* row = logits + i * V;
    double maxv, z;
    row_max_and_sum(row, V, maxv, z);
    const double target = targets[i];
    const double scale = dlosses[i];
    // Read the whole row before writing: dlogits may alias logits.
    for (int64_t j = 0; j < V; ++j) {
      const double p = std::exp(row[j] - maxv) / z;
      const double q = (j == target ? 1.0 - smoothing : 0.0) + double(smoothing) / V;
      dlogits[i * V + j] = float(scale * (p - q));
    }
  }
}

}  // namespace

const VisionBackend& vision_reference_backend() {
  static const VisionBackend backend{
      "reference",          conv2d_forward,     conv2d_backward,  batchnorm_stats,
      batchnorm_forward,    batchnorm_backward_reduce, batchnorm_backward, relu_forward,
      relu_backward,        maxpool_forward,    maxpool_backward, avgpool_forward,
      avgpool_backward,     xent_smooth_forward, xent_smooth_backward};
  return backend;
}

}  // namespace aiscale::ops::vision
