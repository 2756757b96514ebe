// Training-mode batch norm of one NHWC layer through cuDNN's fused kernels
// (cudnnBatchNormalizationForwardTrainingEx / BackwardEx, spatial-persistent mode), with
// the ReLU (CUDNN_BATCHNORM_OPS_BN_ACTIVATION) or the residual add and the ReLU
// (CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION) inside: the alternative to the project's own
// kernels (vision_cuda.cuh), chosen by the model's `batchnorm` setting. cuDNN takes only
// some configurations (layout, type, channel count): the constructor runs the layer once
// on the caller's buffers and throws Error where cuDNN refuses, so the caller can keep
// its own kernels for that layer.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "aiscale/core/dtype.h"
#include "aiscale/ops/vision/cuda/conv_cudnn.cuh"

namespace aiscale::cuda::vision {

// The buffers of one layer. Scale, bias, statistics fp32 (C); activations NHWC of type t.
struct BatchNormBuffers {
  void* y = nullptr;
  const void* x = nullptr;
  const void* z = nullptr;  // residual (null: none)
  const float* gamma = nullptr;
  const float* beta = nullptr;
  float* running_mean = nullptr;
  float* running_var = nullptr;
  float* save_mean = nullptr;
  float* save_rstd = nullptr;
};

class CudnnBatchNorm {
 public:
  // For up to N images of H x W x C; relu and/or a residual add (add implies relu).
  // `probe` (with scratch gradients dx, dz, dgamma, dbeta and dy) is run forward and
  // backward once: contents are overwritten.
  CudnnBatchNorm(CudnnContext& ctx, DType t, int64_t N, int64_t H, int64_t W, int64_t C,
                 bool relu, bool add, const BatchNormBuffers& probe, void* dx, void* dz,
                 float* dgamma, float* dbeta, const void* dy, void* workspace,
                 size_t workspace_bytes, void* reserve, size_t reserve_bytes);
  ~CudnnBatchNorm();
  CudnnBatchNorm(const CudnnBatchNorm&) = delete;
  CudnnBatchNorm& operator=(const CudnnBatchNorm&) = delete;

  // Bytes cuDNN wants for this layer at batch N (call before constructing, to size).
  static size_t reserve_bytes_for(CudnnContext& ctx, DType t, int64_t N, int64_t H, int64_t W,
                                  int64_t C, bool relu, bool add);

  void forward(const BatchNormBuffers& b, float momentum, float eps, int64_t n,
               void* workspace, void* reserve, cudaStream_t s);
  // dx (overwrite, or += when accumulate_dx), dz (overwrite; the residual's gradient),
  // dgamma / dbeta +=. y is the forward's output.
  void backward(void* dx, void* dz, float* dgamma, float* dbeta, const void* dy,
                const BatchNormBuffers& b, float eps, int64_t n, bool accumulate_dx,
                void* workspace, void* reserve, cudaStream_t s);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace aiscale::cuda::vision
