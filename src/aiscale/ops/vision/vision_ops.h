// The vision op set: the layers of convolutional networks (ResNet), declared once with a
// plain reference definition (ops/vision/reference.cpp) and a fast CPU path
// (ops/vision/cpu_*.cpp: im2col + OpenBLAS sgemm for convolutions, OpenMP loops for the
// rest), checked against each other and by finite differences in tests/ops/vision.
//
// Kept beside the GPT vocabulary (ops/op.h) rather than inside it: those ops carry a CUDA
// coverage table and fused GPU variants that convolutions do not share yet. The fully
// connected layer and the residual add of a ResNet are ops of that vocabulary
// (matmul_forward/backward, residual_forward/backward of ops::Backend) and are used from
// there.
//
// Layouts: images NCHW, fp32. Backward conventions as in ops.h: parameter gradients
// ACCUMULATE (+=); activation gradients OVERWRITE unless a comment says otherwise.
#pragma once
#include <cstdint>
#include <optional>
#include <string_view>

namespace aiscale::ops::vision {

enum class VisionOp : uint8_t {
  conv2d_forward,             // out = conv(inp, weight) + bias
  conv2d_backward,            // dinp (overwrite), dweight (+=), dbias (+=)
  batchnorm_stats,            // per-channel sum and sum of squares (double)
  batchnorm_forward,          // out = (inp - mean) * rstd * gamma + beta
  batchnorm_backward_reduce,  // per-channel sum(dout), sum(dout * xhat) (double)
  batchnorm_backward,         // dinp (overwrite) from the (global) reductions
  relu_forward,               // out = max(inp, 0)
  relu_backward,              // dinp = dout where out > 0 (may alias dout)
  maxpool_forward,            // out, argmax index per output
  maxpool_backward,           // dinp (overwrite) scattered through argmax
  avgpool_forward,            // global average: (N, C, H, W) -> (N, C)
  avgpool_backward,           // dinp (overwrite) = dout / (H*W)
  xent_smooth_forward,        // losses with label smoothing
  xent_smooth_backward,       // dlogits (overwrite)
  count
};
inline constexpr int kVisionOpCount = static_cast<int>(VisionOp::count);

std::string_view vision_op_name(VisionOp op);
std::optional<VisionOp> vision_op_by_name(std::string_view name);

// A 2-D convolution with a square kernel, the same stride and zero padding on both axes
// and groups = 1: inp (N, C, H, W), weight (OC, C, K, K), bias (OC), out (N, OC, OH, OW).
struct ConvShape {
  int64_t N = 0, C = 0, H = 0, W = 0;
  int64_t OC = 0, K = 1, stride = 1, pad = 0;
  int64_t OH() const { return (H + 2 * pad - K) / stride + 1; }
  int64_t OW() const { return (W + 2 * pad - K) / stride + 1; }
  int64_t in_size() const { return N * C * H * W; }
  int64_t out_size() const { return N * OC * OH() * OW(); }
  int64_t weight_size() const { return OC * C * K * K; }
};

// Max pooling with a square window (padding positions are never chosen).
struct PoolShape {
  int64_t N = 0, C = 0, H = 0, W = 0;
  int64_t K = 2, stride = 2, pad = 0;
  int64_t OH() const { return (H + 2 * pad - K) / stride + 1; }
  int64_t OW() const { return (W + 2 * pad - K) / stride + 1; }
  int64_t in_size() const { return N * C * H * W; }
  int64_t out_size() const { return N * C * OH() * OW(); }
};

struct VisionBackend {
  const char* name;

  // out (N, OC, OH, OW) = conv(inp, weight) + bias; bias may be null. `scratch` holds at
  // least conv2d_scratch_floats(shape) floats (the fast path's column buffers).
  void (*conv2d_forward)(float* out, const float* inp, const float* weight, const float* bias,
                         const ConvShape& s, float* scratch);
  // dinp (N, C, H, W) overwritten (null: not wanted, the network's input); dweight +=;
  // dbias += (null: no bias).
  void (*conv2d_backward)(float* dinp, float* dweight, float* dbias, const float* dout,
                          const float* inp, const float* weight, const ConvShape& s,
                          float* scratch);

  // sum[c] = sum over n, h, w of inp[n, c, h, w]; sumsq[c] likewise of its square.
  // Overwrites sum and sumsq (C). inp (N, C, HW).
  void (*batchnorm_stats)(double* sum, double* sumsq, const float* inp, int64_t N, int64_t C,
                          int64_t HW);
  // out = (inp - mean[c]) * rstd[c] * gamma[c] + beta[c].
  void (*batchnorm_forward)(float* out, const float* inp, const float* mean, const float* rstd,
                            const float* gamma, const float* beta, int64_t N, int64_t C,
                            int64_t HW);
  // sum_dy[c] = sum dout; sum_dy_xhat[c] = sum dout * (inp - mean) * rstd. Overwrites.
  void (*batchnorm_backward_reduce)(double* sum_dy, double* sum_dy_xhat, const float* dout,
                                    const float* inp, const float* mean, const float* rstd,
                                    int64_t N, int64_t C, int64_t HW);
  // Training-mode batch norm backward from the reductions over all `count` values of a
  // channel (count = N*HW on one rank, the sum over ranks when synchronised):
  // dinp = gamma * rstd * (dout - sum_dy / count - xhat * sum_dy_xhat / count). Overwrites.
  void (*batchnorm_backward)(float* dinp, const float* dout, const float* inp,
                             const float* mean, const float* rstd, const float* gamma,
                             const double* sum_dy, const double* sum_dy_xhat, double count,
                             int64_t N, int64_t C, int64_t HW);

  void (*relu_forward)(float* out, const float* inp, int64_t n);
  // dinp = out > 0 ? dout : 0, from the forward's output; dinp may alias dout.
  void (*relu_backward)(float* dinp, const float* out, const float* dout, int64_t n);

  // out (N, C, OH, OW); argmax (same size) the flat index h*W + w of each maximum.
  void (*maxpool_forward)(float* out, int32_t* argmax, const float* inp, const PoolShape& s);
  void (*maxpool_backward)(float* dinp, const float* dout, const int32_t* argmax,
                           const PoolShape& s);

  // Global average pooling: out (N, C) = mean over HW of inp (N, C, HW).
  void (*avgpool_forward)(float* out, const float* inp, int64_t N, int64_t C, int64_t HW);
  void (*avgpool_backward)(float* dinp, const float* dout, int64_t N, int64_t C, int64_t HW);

  // Cross-entropy against the label-smoothed target q = (1 - eps) onehot(t) + eps / V:
  // losses (N) = -sum_j q_j log softmax(logits)_j. eps = 0: the plain cross-entropy.
  void (*xent_smooth_forward)(float* losses, const float* logits, const int32_t* targets,
                              int64_t N, int64_t V, float smoothing);
  // dlogits (N, V) = dlosses[i] * (softmax(logits[i]) - q). May alias logits.
  void (*xent_smooth_backward)(float* dlogits, const float* logits, const int32_t* targets,
                               const float* dlosses, int64_t N, int64_t V, float smoothing);
};
static_assert(sizeof(VisionBackend) ==
                  sizeof(const char*) + kVisionOpCount * sizeof(void (*)()),
              "VisionOp changed: update VisionBackend, every table and tests/ops/vision");

// Floats of scratch the convolution entries need for `s` (both backends; the reference
// needs none).
int64_t conv2d_scratch_floats(const ConvShape& s);

const VisionBackend& vision_reference_backend();
const VisionBackend& vision_cpu_backend();
// "reference" or "cpu"; throws Error otherwise.
const VisionBackend& vision_backend_by_name(std::string_view name);

}  // namespace aiscale::ops::vision
