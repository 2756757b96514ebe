// The vision ops on the GPU, callable from host code (.cpp or .cu): batch norm in training
// and evaluation (statistics, normalisation with an optional residual add and ReLU, and the
// backward through both), max pooling, global average pooling, the label-smoothed softmax
// cross-entropy with top-1/top-5 counts, SGD with momentum, and the layout conversions
// between the host's NCHW / OIHW and the device's NHWC / OHWI.
//
// Layouts: activations NHWC, that is rows = N*H*W of C contiguous channels, of type `t`
// (fp32, bf16 or fp16; math in fp32). Batch norm parameters, statistics and every
// parameter gradient are fp32. Backward conventions as in ops/vision/vision_ops.h:
// parameter gradients accumulate (+=); activation gradients overwrite unless `accumulate`
// is set (a tensor read by two layers sums both gradients).
//
// The convolutions are cuDNN's (conv_cudnn.cuh). Checked against the CPU ops by
// tests/gpu_vision.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "aiscale/core/dtype.h"

namespace aiscale::cuda::vision {

// ---------------------------------------------------------------------------------------
// Batch norm (batchnorm.cu). Rows R = N*H*W of C channels.

// Floats of scratch the statistics and backward reductions need for R rows of C channels
// (partial sums per block of rows). Non-decreasing in R: size it for the largest batch.
int64_t batchnorm_scratch_floats(int64_t R, int64_t C);

// Training forward statistics: mean and rstd (C, fp32) of the batch, and the running
// statistics updated (PyTorch's rule: momentum, unbiased variance) when running_mean is
// non-null. scale/shift (C) receive gamma*rstd and beta - mean*gamma*rstd.
void batchnorm_stats(DType t, float* mean, float* rstd, float* scale, float* shift,
                     float* running_mean, float* running_var, const void* x, const float* gamma,
                     const float* beta, int64_t R, int64_t C, float eps, float momentum,
                     float* scratch, cudaStream_t s);
// Evaluation: scale/shift from the running statistics.
void batchnorm_eval_coefficients(float* scale, float* shift, const float* running_mean,
                                 const float* running_var, const float* gamma, const float* beta,
                                 int64_t C, float eps, cudaStream_t s);
// y = x * scale[c] + shift[c] (+ z) (then ReLU when relu). z may be null.
void batchnorm_apply(DType t, void* y, const void* x, const void* z, const float* scale,
                     const float* shift, int64_t R, int64_t C, bool relu, cudaStream_t s);
// Backward of y = act(bn(x) [+ z]) with the batch's statistics: g = dy masked by y > 0
// when relu; dgamma += sum g * xhat, dbeta += sum g; dx from the batch statistics
// (overwrite, or += when accumulate_dx); dz = g (overwrite, or += when accumulate_dz;
// dz null: no add in the forward). y is the forward's output (read only when relu).
void batchnorm_backward(DType t, void* dx, void* dz, float* dgamma, float* dbeta,
                        const void* dy, const void* y, const void* x, const float* mean,
                        const float* rstd, const float* gamma, int64_t R, int64_t C, bool relu,
                        bool accumulate_dx, bool accumulate_dz, float* scratch, cudaStream_t s);

// ---------------------------------------------------------------------------------------
// Pooling (pool.cu)

// Max pooling, square window K, stride, zero padding never chosen: x (N, H, W, C) ->
// y (N, OH, OW, C); argmax (N, OH, OW, C) the flat index h*W + w of each maximum (the
// first in window order on ties, as the CPU ops).
void maxpool_forward(DType t, void* y, int32_t* argmax, const void* x, int64_t N, int64_t H,
                     int64_t W, int64_t C, int64_t K, int64_t stride, int64_t pad,
                     cudaStream_t s);
// dx (N, H, W, C) = the dy of every window whose maximum it was (overwrite, or +=).
void maxpool_backward(DType t, void* dx, const void* dy, const int32_t* argmax, int64_t N,
                      int64_t H, int64_t W, int64_t C, int64_t K, int64_t stride, int64_t pad,
                      bool accumulate, cudaStream_t s);
// Global average: x (N, HW, C) -> y (N, C).
void avgpool_forward(DType t, void* y, const void* x, int64_t N, int64_t HW, int64_t C,
                     cudaStream_t s);
// dx (N, HW, C) = dy / HW (overwrite, or +=).
void avgpool_backward(DType t, void* dx, const void* dy, int64_t N, int64_t HW, int64_t C,
                      bool accumulate, cudaStream_t s);

// ---------------------------------------------------------------------------------------
// Loss, optimiser and layouts (vision_kernels.cu)

// Per row of logits (N, V) against the label-smoothed target: losses (N, fp32), and
// dlogits (N, V, type t; may alias logits) = dloss * (softmax - q) when dlogits is
// non-null. correct[0] / correct[1] (ints, zeroed here) count rows whose label is among
// the top 1 / top 5 classes (ties count against it, as the CPU model).
void xent_smooth(DType t, float* losses, void* dlogits, int32_t* correct, const void* logits,
                 const int32_t* labels, int64_t N, int64_t V, float smoothing, float dloss,
                 cudaStream_t s);
// dbias (OC) += column sums of dout (N, OC) of type t.
void column_sum_add(DType t, float* dbias, const void* dout, int64_t N, int64_t OC,
                    cudaStream_t s);

// SGD with momentum over n fp32 values (PyTorch's form): g = grad * grad_scale, plus
// weight_decay * p for i < decay_end; v = mu v + g; p -= lr (nesterov ? g + mu v : v).
// copy (type t, may be null) receives p for i < copy_end (the compute weights of AMP).
void sgd_step(float* params, const float* grads, float* velocity, int64_t n, float lr,
              float momentum, bool nesterov, float weight_decay, int64_t decay_end,
              float grad_scale, DType t, void* copy, int64_t copy_end, cudaStream_t s);
// dst (fp32) += src (type t), n values.
void add_to_f32(float* dst, const void* src, DType t, int64_t n, cudaStream_t s);
// dst (type t) = src (fp32), n values.
void convert_from_f32(void* dst, DType t, const float* src, int64_t n, cudaStream_t s);
// Images: src (N, C, H, W) fp32 -> dst (N, H, W, C) of type t.
void nchw_to_nhwc(DType t, void* dst, const float* src, int64_t N, int64_t C, int64_t HW,
                  cudaStream_t s);

}  // namespace aiscale::cuda::vision
