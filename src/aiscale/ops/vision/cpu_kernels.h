// The fast CPU vision ops (cpu_conv.cpp, cpu_layers.cpp); table.cpp gathers them into the
// "cpu" VisionBackend. Signatures and conventions are those of VisionBackend.
#pragma once
#include <cstdint>

#include "aiscale/ops/vision/vision_ops.h"

namespace aiscale::ops::vision::cpu {

int64_t conv2d_scratch_floats(const ConvShape& s);
void conv2d_forward(float* out, const float* inp, const float* weight, const float* bias,
                    const ConvShape& s, float* scratch);
void conv2d_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                     const float* inp, const float* weight, const ConvShape& s, float* scratch);

void batchnorm_stats(double* sum, double* sumsq, const float* inp, int64_t N, int64_t C,
                     int64_t HW);
void batchnorm_forward(float* out, const float* inp, const float* mean, const float* rstd,
                       const float* gamma, const float* beta, int64_t N, int64_t C, int64_t HW);
void batchnorm_backward_reduce(double* sum_dy, double* sum_dy_xhat, const float* dout,
                               const float* inp, const float* mean, const float* rstd,
                               int64_t N, int64_t C, int64_t HW);
void batchnorm_backward(float* dinp, const float* dout, const float* inp, const float* mean,
                        const float* rstd, const float* gamma, const double* sum_dy,
                        const double* sum_dy_xhat, double count, int64_t N, int64_t C,
                        int64_t HW);

void relu_forward(float* out, const float* inp, int64_t n);
void relu_backward(float* dinp, const float* out, const float* dout, int64_t n);
void maxpool_forward(float* out, int32_t* argmax, const float* inp, const PoolShape& s);
void maxpool_backward(float* dinp, const float* dout, const int32_t* argmax, const PoolShape& s);
void avgpool_forward(float* out, const float* inp, int64_t N, int64_t C, int64_t HW);
void avgpool_backward(float* dinp, const float* dout, int64_t N, int64_t C, int64_t HW);
void xent_smooth_forward(float* losses, const float* logits, const int32_t* targets, int64_t N,
                         int64_t V, float smoothing);
void xent_smooth_backward(float* dlogits, const float* logits, const int32_t* targets,
                          const float* dlosses, int64_t N, int64_t V, float smoothing);

}  // namespace aiscale::ops::vision::cpu
