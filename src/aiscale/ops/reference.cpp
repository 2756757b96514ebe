// The reference backend: the plain, readable definition of every op in ops.h.
// Simple loops, sums in double, no BLAS, no threads. It is slow on purpose: the fast
// CPU path (ops/cpu) and the CUDA kernels are checked against it by tests/ops.
#include <algorithm>
#include <cmath>
#include <limits>

#include "aiscale/core/error.h"
#include "aiscale/ops/ops.h"

namespace aiscale::ops {
namespace {

constexpr float kLayerNormEps = 1e-5f;
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluCubic = 0.044715f;

// ---------------------------------------------------------------------------------------
// matmul: out = inp @ weight^T + bias

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias,
                    int64_t N, int64_t C, int64_t OC) {
  // out (N, OC), inp (N, C), weight (OC, C), bias (OC) or null
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t o = 0; o < OC; ++o) {
      double sum = bias ? bias[o] : 0.0;
      for (int64_t c = 0; c < C; ++c) sum += double(inp[n * C + c]) * weight[o * C + c];
      out[n * OC + o] = float(sum);
    }
  }
}

void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                     const float* inp, const float* weight, int64_t N, int64_t C, int64_t OC) {
  // dinp (N, C) overwritten, dweight (OC, C) +=, dbias (OC) +=, dout (N, OC),
  // inp (N, C), weight (OC, C)
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t c = 0; c < C; ++c) {
      double sum = 0.0;
      for (int64_t o = 0; o < OC; ++o) sum += double(dout[n * OC + o]) * weight[o * C + c];
      dinp[n * C + c] = float(sum);
    }
  }
  for (int64_t o = 0; o < OC; ++o) {
    for (int64_t c = 0; c < C; ++c) {
      double sum = 0.0;
      for (int64_t n = 0; n < N; ++n) sum += double(dout[n * OC + o]) * inp[n * C + c];
      dweight[o * C + c] += float(sum);
    }
  }
  if (dbias) {
    for (int64_t o = 0; o < OC; ++o) {
      double sum = 0.0;
      for (int64_t n = 0; n < N; ++n) sum += dout[n * OC + o];
      dbias[o] += float(sum);
    }
  }
}

// ---------------------------------------------------------------------------------------
// embedding: out[b, t] = wte[token] + wpe[t]

void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                       int64_t B, int64_t T, int64_t C) {
  // out (B, T, C), tokens (B, T), wte (V, C), wpe (maxT, C)
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      const float* token_row = wte + int64_t(tokens[b * T + t]) * C;
      float* out_row = out + (b * T + t) * C;
      if (!wpe) {  // no position embedding (rotary positions come later)
        for (int64_t c = 0; c < C; ++c) out_row[c] = token_row[c];
        continue;
      }
      const float* position_row = wpe + t * C;
      for (int64_t c = 0; c < C; ++c) out_row[c] = token_row[c] + position_row[c];
    }
  }
}

void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                        int64_t B, int64_t T, int64_t C) {
  // dwte (V, C) +=, dwpe (maxT, C) +=, dout (B, T, C), tokens (B, T)
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      float* dtoken_row = dwte + int64_t(tokens[b * T + t]) * C;
      const float* dout_row = dout + (b * T + t) * C;
      for (int64_t c = 0; c < C; ++c) dtoken_row[c] += dout_row[c];
      if (!dwpe) continue;
      float* dposition_row = dwpe + t * C;
      for (int64_t c = 0; c < C; ++c) dposition_row[c] += dout_row[c];
    }
  }
}

// ---------------------------------------------------------------------------------------
// layernorm over the last dimension, biased variance, eps 1e-5

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                       const float* weight, const float* bias, int64_t N, int64_t C) {
  // out (N, C), mean (N), rstd (N), inp (N, C), weight (C), bias (C)
  for (int64_t n = 0; n < N; ++n) {
    const float* x = inp + n * C;
    double sum = 0.0;
    for (int64_t c = 0; c < C; ++c) sum += x[c];
    const double m = sum / double(C);
    double sum_sq = 0.0;
    for (int64_t c = 0; c < C; ++c) sum_sq += (x[c] - m) * (x[c] - m);
    const double variance = sum_sq / double(C);
    const double s = 1.0 / std::sqrt(variance + kLayerNormEps);
    for (int64_t c = 0; c < C; ++c) {
      out[n * C + c] = float((x[c] - m) * s * weight[c] + bias[c]);
    }
    mean[n] = float(m);
    rstd[n] = float(s);
  }
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean,
                        const float* rstd, int64_t N, int64_t C) {
  // dinp (N, C) accumulates, dweight (C) +=, dbias (C) +=, dout (N, C), inp (N, C),
  // weight (C), mean (N), rstd (N)
  for (int64_t n = 0; n < N; ++n) {
    const float* x = inp + n * C;
    const float* dy = dout + n * C;
    // norm = (x - mean) * rstd; dnorm = dy * weight
    double dnorm_mean = 0.0, dnorm_norm_mean = 0.0;
    for (int64_t c = 0; c < C; ++c) {
      const double norm = (double(x[c]) - mean[n]) * rstd[n];
      const double dnorm = double(dy[c]) * weight[c];
      dnorm_mean += dnorm;
      dnorm_norm_mean += dnorm * norm;
    }
    dnorm_mean /= double(C);
    dnorm_norm_mean /= double(C);
    for (int64_t c = 0; c < C; ++c) {
      const double norm = (double(x[c]) - mean[n]) * rstd[n];
      const double dnorm = double(dy[c]) * weight[c];
      dbias[c] += dy[c];
      dweight[c] += float(norm * dy[c]);
      dinp[n * C + c] += float((dnorm - dnorm_mean - norm * dnorm_norm_mean) * rstd[n]);
    }
  }
}

// ---------------------------------------------------------------------------------------
// GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))

void gelu_forward(float* out, const float* inp, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float x = inp[i];
    const float u = kGeluScale * (x + kGeluCubic * x * x * x);
    out[i] = 0.5f * x * (1.0f + std::tanh(u));
  }
}

void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) {
  // dinp may alias dout: each element is read before it is written.
  for (int64_t i = 0; i < n; ++i) {
    const float x = inp[i];
    const float u = kGeluScale * (x + kGeluCubic * x * x * x);
    const float t = std::tanh(u);
    const float du_dx = kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
    const float sech2 = 1.0f - t * t;
    const float local_grad = 0.5f * (1.0f + t) + 0.5f * x * sech2 * du_dx;
    dinp[i] = local_grad * dout[i];
  }
}

// ---------------------------------------------------------------------------------------
// causal attention, multi-head (NKV == NH) or grouped-query (query head h uses key/value
// head h / (NH / NKV))

void attention_gqa_forward(float* out, float* att, const float* qkv, int64_t B, int64_t T,
                           int64_t C, int64_t NH, int64_t NKV) {
  // out (B, T, C), att (B, NH, T, T), qkv (B, T, C + 2 KC)
  const AttentionHeads heads = attention_heads(C, NH, NKV);
  const int64_t HS = heads.HS, KC = heads.KC, W = heads.W, group = heads.group;
  const double scale = 1.0 / std::sqrt(double(HS));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < NH; ++h) {
      const int64_t kv = h / group;
      for (int64_t t = 0; t < T; ++t) {
        const float* q = qkv + (b * T + t) * W + h * HS;     // (HS)
        float* att_row = att + ((b * NH + h) * T + t) * T;  // (T)
        // scores of the keys t2 <= t, then their softmax
        float max_score = -std::numeric_limits<float>::infinity();
        for (int64_t t2 = 0; t2 <= t; ++t2) {
          const float* k = qkv + (b * T + t2) * W + C + kv * HS;  // (HS)
          double dot = 0.0;
          for (int64_t i = 0; i < HS; ++i) dot += double(q[i]) * k[i];
          att_row[t2] = float(dot * scale);
          max_score = std::max(max_score, att_row[t2]);
        }
        double sum = 0.0;
        for (int64_t t2 = 0; t2 <= t; ++t2) sum += std::exp(double(att_row[t2]) - max_score);
        for (int64_t t2 = 0; t2 <= t; ++t2) {
          att_row[t2] = float(std::exp(double(att_row[t2]) - max_score) / sum);
        }
        for (int64_t t2 = t + 1; t2 < T; ++t2) att_row[t2] = 0.0f;
        // out = att @ v
        float* o = out + (b * T + t) * C + h * HS;  // (HS)
        for (int64_t i = 0; i < HS; ++i) {
          double acc = 0.0;
          for (int64_t t2 = 0; t2 <= t; ++t2) {
            const float* v = qkv + (b * T + t2) * W + C + KC + kv * HS;  // (HS)
            acc += double(att_row[t2]) * v[i];
          }
          o[i] = float(acc);
        }
      }
    }
  }
}

void attention_gqa_backward(float* dqkv, float* datt, const float* dout, const float* qkv,
                            const float* att, int64_t B, int64_t T, int64_t C, int64_t NH,
                            int64_t NKV) {
  // dqkv (B, T, C + 2 KC) overwritten, datt (B, NH, T, T) scratch, dout (B, T, C),
  // qkv (B, T, C + 2 KC), att (B, NH, T, T)
  const AttentionHeads heads = attention_heads(C, NH, NKV);
  const int64_t HS = heads.HS, KC = heads.KC, W = heads.W, group = heads.group;
  const float scale = 1.0f / std::sqrt(float(HS));
  for (int64_t i = 0; i < B * T * W; ++i) dqkv[i] = 0.0f;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < NH; ++h) {
      const int64_t kv = h / group;
      for (int64_t t = 0; t < T; ++t) {
        const float* att_row = att + ((b * NH + h) * T + t) * T;  // (T)
        float* datt_row = datt + ((b * NH + h) * T + t) * T;      // (T)
        const float* dout_t = dout + (b * T + t) * C + h * HS;    // (HS)
        const float* q = qkv + (b * T + t) * W + h * HS;          // (HS)
        float* dq = dqkv + (b * T + t) * W + h * HS;              // (HS)
        // through out = att @ v: datt = dout . v, dv += att * dout (summed over the group)
        for (int64_t t2 = 0; t2 <= t; ++t2) {
          const float* v = qkv + (b * T + t2) * W + C + KC + kv * HS;
          float* dv = dqkv + (b * T + t2) * W + C + KC + kv * HS;
          double dot = 0.0;
          for (int64_t i = 0; i < HS; ++i) {
            dot += double(dout_t[i]) * v[i];
            dv[i] += att_row[t2] * dout_t[i];
          }
          datt_row[t2] = float(dot);
        }
        // through the softmax: dscore = att * (datt - sum_j att_j datt_j)
        double weighted = 0.0;
        for (int64_t t2 = 0; t2 <= t; ++t2) weighted += double(att_row[t2]) * datt_row[t2];
        for (int64_t t2 = 0; t2 <= t; ++t2) {
          datt_row[t2] = float(att_row[t2] * (datt_row[t2] - weighted));
        }
        // through score = scale * q . k
        for (int64_t t2 = 0; t2 <= t; ++t2) {
          const float* k = qkv + (b * T + t2) * W + C + kv * HS;
          float* dk = dqkv + (b * T + t2) * W + C + kv * HS;
          const float dscore = scale * datt_row[t2];
          for (int64_t i = 0; i < HS; ++i) {
            dq[i] += dscore * k[i];
            dk[i] += dscore * q[i];
          }
        }
      }
    }
  }
}


// ---------------------------------------------------------------------------------------
// RMSNorm: out = inp * rstd * weight, rstd = 1 / sqrt(mean(inp^2) + eps)

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int64_t N,
                     int64_t C, float eps) {
  for (int64_t n = 0; n < N; ++n) {
    const float* x = inp + n * C;
    double sum = 0.0;
    for (int64_t c = 0; c < C; ++c) sum += double(x[c]) * x[c];
    const float r = float(1.0 / std::sqrt(sum / double(C) + double(eps)));
    for (int64_t c = 0; c < C; ++c) out[n * C + c] = x[c] * r * weight[c];
    rstd[n] = r;
  }
}

void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                      const float* weight, const float* rstd, int64_t N, int64_t C) {
  // y_c = x_c r w_c with r = (mean(x^2) + eps)^-1/2, so dr/dx_c = -r^3 x_c / C:
  // dx_c = r w_c dy_c - r^3 x_c / C * sum_j w_j dy_j x_j
  for (int64_t n = 0; n < N; ++n) {
    const float* x = inp + n * C;
    const float* dy = dout + n * C;
    const double r = rstd[n];
    double dot = 0.0;
    for (int64_t c = 0; c < C; ++c) dot += double(weight[c]) * dy[c] * x[c];
    const double k = r * r * r * dot / double(C);
    for (int64_t c = 0; c < C; ++c) {
      dinp[n * C + c] += float(r * weight[c] * dy[c] - k * x[c]);
      dweight[c] += float(double(dy[c]) * x[c] * r);
    }
  }
}

// ---------------------------------------------------------------------------------------
// rotary positions: each Q and K head's pairs (i, i + HS/2) rotated by the position's angle

void rope_rotate(float* out, const float* inp, const float* cos, const float* sin, int64_t N,
                 int64_t T, int64_t NH, int64_t NKV, int64_t HS, float direction) {
  const int64_t W = (NH + 2 * NKV) * HS, half = HS / 2;
  for (int64_t n = 0; n < N; ++n) {
    const int64_t pos = n % T;
    for (int64_t h = 0; h < NH + NKV; ++h) {
      const float* x = inp + n * W + h * HS;
      float* y = out + n * W + h * HS;
      for (int64_t i = 0; i < half; ++i) {
        const double c = cos[pos * half + i], s = direction * sin[pos * half + i];
        const double x0 = x[i], x1 = x[i + half];
        y[i] = float(x0 * c - x1 * s);
        y[i + half] = float(x1 * c + x0 * s);
      }
    }
    if (out != inp)
      for (int64_t i = (NH + NKV) * HS; i < W; ++i) out[n * W + i] = inp[n * W + i];
  }
}

void rope_forward(float* out, const float* inp, const float* cos, const float* sin, int64_t N,
                  int64_t T, int64_t NH, int64_t NKV, int64_t HS) {
  AISCALE_CHECK(HS % 2 == 0, "rotary positions need an even head size, not {}", HS);
  rope_rotate(out, inp, cos, sin, N, T, NH, NKV, HS, 1.0f);
}

// The rotation is orthogonal: its gradient is the rotation by the opposite angle.
void rope_backward(float* dinp, const float* dout, const float* cos, const float* sin, int64_t N,
                   int64_t T, int64_t NH, int64_t NKV, int64_t HS) {
  AISCALE_CHECK(HS % 2 == 0, "rotary positions need an even head size, not {}", HS);
  rope_rotate(dinp, dout, cos, sin, N, T, NH, NKV, HS, -1.0f);
}

// ---------------------------------------------------------------------------------------
// SwiGLU: out = silu(gate) * up

void swiglu_forward(float* out, const float* inp, int64_t N, int64_t F) {
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t f = 0; f < F; ++f) {
      const double g = inp[n * 2 * F + f], u = inp[n * 2 * F + F + f];
      out[n * F + f] = float(g / (1.0 + std::exp(-g)) * u);
    }
  }
}

void swiglu_backward(float* dinp, const float* inp, const float* dout, int64_t N, int64_t F) {
  // d silu(g) / dg = sig(g) (1 + g (1 - sig(g)))
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t f = 0; f < F; ++f) {
      const double g = inp[n * 2 * F + f], u = inp[n * 2 * F + F + f], dy = dout[n * F + f];
      const double sig = 1.0 / (1.0 + std::exp(-g));
      dinp[n * 2 * F + f] = float(dy * u * sig * (1.0 + g * (1.0 - sig)));
      dinp[n * 2 * F + F + f] = float(dy * g * sig);
    }
  }
}

// ---------------------------------------------------------------------------------------
// residual: out = a + b

void residual_forward(float* out, const float* a, const float* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void residual_backward(float* da, float* db, const float* dout, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    da[i] += dout[i];
    db[i] += dout[i];
  }
}

// ---------------------------------------------------------------------------------------
// softmax cross-entropy, numerically stable (the row maximum is subtracted)

void softmax_xent_forward(float* losses, const float* logits, const int32_t* targets,
                          int64_t N, int64_t V) {
  // losses (N), logits (N, V), targets (N)
  for (int64_t n = 0; n < N; ++n) {
    const float* row = logits + n * V;
    float max_logit = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < V; ++j) max_logit = std::max(max_logit, row[j]);
    double sum = 0.0;
    for (int64_t j = 0; j < V; ++j) sum += std::exp(double(row[j]) - max_logit);
    // -log(exp(x_target - max) / sum)
    losses[n] = float(std::log(sum) - (double(row[targets[n]]) - max_logit));
  }
}

void softmax_xent_backward(float* dlogits, const float* logits, const int32_t* targets,
                           const float* dlosses, int64_t N, int64_t V) {
  // dlogits (N, V) overwritten and may alias logits (N, V); targets (N), dlosses (N)
  for (int64_t n = 0; n < N; ++n) {
    const float* row = logits + n * V;
    float* drow = dlogits + n * V;
    float max_logit = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < V; ++j) max_logit = std::max(max_logit, row[j]);
    double sum = 0.0;
    for (int64_t j = 0; j < V; ++j) sum += std::exp(double(row[j]) - max_logit);
    // row[j] is read before drow[j] is written, so aliasing is fine.
    for (int64_t j = 0; j < V; ++j) {
      const double p = std::exp(double(row[j]) - max_logit) / sum;
      const double indicator = (j == targets[n]) ? 1.0 : 0.0;
      drow[j] = float(dlosses[n] * (p - indicator));
    }
  }
}

// ---------------------------------------------------------------------------------------
// AdamW as PyTorch's single-tensor implementation evaluates it: decoupled decay first,
//   p *= 1 - lr * wd
// then the bias-corrected Adam step, written the way PyTorch orders the float operations:
//   m += (1 - b1) (g - m)            (lerp; = b1 m + (1 - b1) g)
//   v  = b2 v + (1 - b2) g g
//   p -= (lr / bc1) m / (sqrt(v) / sqrt(bc2) + eps)   (= lr mhat / (sqrt(vhat) + eps))
// with bc1 = 1 - b1^step, bc2 = 1 - b2^step computed in double.

void adamw_update(float* params, const float* grads, float* m, float* v, int64_t n,
                  const AdamWParams& hp) {
  // params, grads, m, v (n)
  const double bias_correction1 = 1.0 - std::pow(double(hp.beta1), double(hp.step));
  const double bias_correction2 = 1.0 - std::pow(double(hp.beta2), double(hp.step));
  const float step_size = float(double(hp.lr) / bias_correction1);
  const float bias_correction2_sqrt = float(std::sqrt(bias_correction2));
  const float decay = 1.0f - hp.lr * hp.weight_decay;
  for (int64_t i = 0; i < n; ++i) {
    const float g = grads[i] * hp.grad_scale;
    m[i] += (1.0f - hp.beta1) * (g - m[i]);
    v[i] = hp.beta2 * v[i] + (1.0f - hp.beta2) * g * g;
    const float denom = std::sqrt(v[i]) / bias_correction2_sqrt + hp.eps;
    params[i] = params[i] * decay - step_size * (m[i] / denom);
  }
}

}  // namespace

const Backend& reference_backend() {
  static const Backend backend{
      "reference",
      matmul_forward,
      matmul_backward,
      embedding_forward,
      embedding_backward,
      layernorm_forward,
      layernorm_backward,
      gelu_forward,
      gelu_backward,
      mha_forward<attention_gqa_forward>,
      mha_backward<attention_gqa_backward>,
      residual_forward,
      residual_backward,
      softmax_xent_forward,
      softmax_xent_backward,
      adamw_update,
      rmsnorm_forward,
      rmsnorm_backward,
      rope_forward,
      rope_backward,
      swiglu_forward,
      swiglu_backward,
      attention_gqa_forward,
      attention_gqa_backward,
  };
  return backend;
}

}  // namespace aiscale::ops
