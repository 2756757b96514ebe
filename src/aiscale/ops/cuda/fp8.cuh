// FP8 training on the GPU: the ops fp8_quantize and fp8_scale_update of ops/fp8.h as
// kernels (fp8.cu), linear layers whose GEMMs take FP8 operands (matmul.cu), and
// Fp8Training, which keeps the delayed-scaling state and the quantised operands of a
// model's linear layers (fp8.cu).
//
// A linear layer in FP8 runs its three GEMMs as Hopper's FP8 tensor cores take them
// (both operands K-major, "TN"):
//   forward   out (N, OC)   = x (N, C) e4m3   . w (OC, C) e4m3          (fast accumulation)
//   dgrad     dinp (N, C)   = dout (N, OC) e5m2 . w^T (C, OC) e4m3
//   wgrad     dw (OC, C)   += dout^T (OC, N) e5m2 . x^T (C, N) e4m3      (fp32, accumulated)
// so x, w and dout are quantised once each way they are read (the transposed copies by the
// same kernel pass). Outputs, bias and residual stay in the activations' 16-bit type; the
// bias gradient is taken from the 16-bit output gradient.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <functional>

#include "aiscale/ops/cuda/cuda_ops.cuh"
#include "aiscale/ops/fp8.h"

namespace aiscale::cuda {

// inp (rows, cols) of type t times *scale (device), encoded into out (rows, cols) and / or
// out_t (cols, rows), either may be null; *amax (device) = max(*amax, max |inp|), a NaN
// counted as +inf. rows and cols must satisfy coverage::fp8_shape_ok.
void fp8_quantize(DType t, uint8_t* out, uint8_t* out_t, float* amax, const void* inp,
                  int64_t rows, int64_t cols, const float* scale, ops::Fp8Format f,
                  cudaStream_t s);

// ops::fp8_scale_update over arrays on the device (formats too).
void fp8_scale_update(const ops::Fp8ScalingArrays& a, int64_t pos, int margin, cudaStream_t s);

// An FP8 operand on the device: its codes and the float that dequantises them (1 / scale;
// cuBLASLt refuses a scale pointer that is not 16-byte aligned).
struct Fp8Operand {
  const uint8_t* data = nullptr;
  const float* scale_inv = nullptr;
  ops::Fp8Format format = ops::Fp8Format::e4m3;
};

// The three GEMMs above. Each returns false and runs nothing where cuBLASLt has no
// algorithm for the call (or a size is not a multiple of 16); the caller then takes the
// 16-bit path. fp8_linear_forward takes linear_forward's bias, residual and GELU (pre_gelu)
// arguments; fp8_linear_backward_input writes dinp (overwritten) from w_t = W^T (C, OC),
// with linear_backward_input's GELU arguments; fp8_linear_backward_weight adds into dweight
// from dout_t (OC, N) and x_t (C, N).
bool fp8_linear_forward(Gemm& g, DType t, void* out, void* pre_gelu, const Fp8Operand& x,
                        const Fp8Operand& w, const void* bias, const void* residual, int64_t N,
                        int64_t C, int64_t OC, const LinearOptions& o, cudaStream_t s);
bool fp8_linear_backward_input(Gemm& g, DType t, void* dinp, const Fp8Operand& dout,
                               const Fp8Operand& w_t, int64_t N, int64_t C, int64_t OC,
                               const void* gelu_pre, float* dbias_gelu, float* bias_scratch,
                               cudaStream_t s);
bool fp8_linear_backward_weight(Gemm& g, float* dweight, const Fp8Operand& dout_t,
                                const Fp8Operand& x_t, int64_t N, int64_t C, int64_t OC,
                                cudaStream_t s);

// The FP8 state of a model's `linears` linear layers (ids 0 .. linears - 1): three scaled
// tensors each (input and weight e4m3, output gradient e5m2) with their amax histories on
// the device, and the scratch that holds one layer's quantised operands at a time (all
// work on one stream). Activations of at most max_act elements (N x the widest input or
// output), weights of at most max_weight.
class Fp8Training {
 public:
  Fp8Training(int64_t linears, int64_t max_act, int64_t max_weight, int history, int margin);
  ~Fp8Training();
  Fp8Training(const Fp8Training&) = delete;
  Fp8Training& operator=(const Fp8Training&) = delete;

  // Linear `id`'s forward: x and w quantised with their current scales (their amaxes
  // recorded), then fp8_linear_forward. False: not taken, nothing run.
  bool forward(Gemm& g, DType t, int64_t id, void* out, void* pre_gelu, const void* inp,
               const void* weight, const void* bias, const void* residual, int64_t N, int64_t C,
               int64_t OC, const LinearOptions& o, cudaStream_t s);
  // Linear `id`'s backward in two halves sharing the quantised output gradient, with
  // linear_backward_weight's and linear_backward_input's bias and GELU arguments:
  // backward_weight quantises dout (N, OC) both ways and inp transposed, adds the weight
  // gradient and, with dbias, writes dout's column sums there (false: not taken, nothing
  // run; both halves then take the 16-bit path); backward_input, after a backward_weight of
  // the same id that returned true, quantises W^T and writes dinp (false: no FP8 algorithm
  // for it, dinp not written: the caller takes the 16-bit path for this half).
  bool backward_weight(Gemm& g, DType t, int64_t id, float* dweight, float* dbias,
                       const void* dout, const void* inp, int64_t N, int64_t C, int64_t OC,
                       float* bias_scratch, cudaStream_t s);
  bool backward_input(Gemm& g, DType t, int64_t id, void* dinp, const void* weight, int64_t N,
                      int64_t C, int64_t OC, const void* gelu_pre, float* dbias_gelu,
                      float* bias_scratch, cudaStream_t s);

  // End of an optimiser step: the amaxes into the histories, the next scales.
  void update_scales(cudaStream_t s);

  // Called with "fp8_quantize" before each quantisation and with the GEMM's op name and
  // FLOPs before each GEMM (a profiler's marks; none by default).
  using Marker = std::function<void(const char* op, double flops)>;
  void set_marker(Marker m) { mark_ = std::move(m); }

  // The scaling arrays (device pointers) for inspection and tests.
  const ops::Fp8ScalingArrays& arrays() const { return arrays_; }
  int64_t steps() const { return steps_; }
  size_t bytes() const { return bytes_; }

 private:
  enum Tensor { kInput = 0, kWeight = 1, kGrad = 2 };
  static constexpr int64_t kScaleStride = 4;  // floats: each slot's scale 16-byte aligned
  int64_t slot(int64_t id, Tensor k) const { return 3 * id + k; }
  static ops::Fp8Format format(int64_t slot) {
    return slot % 3 == kGrad ? ops::Fp8Format::e5m2 : ops::Fp8Format::e4m3;
  }
  Fp8Operand operand(const uint8_t* data, int64_t slot) const;
  // fp8_quantize of `inp` (rows, cols) with slot's scale, format and amax.
  void quantize(DType t, uint8_t* out, uint8_t* out_t, const void* inp, int64_t rows,
                int64_t cols, int64_t slot, cudaStream_t s);

  ops::Fp8ScalingArrays arrays_;
  void* state_ = nullptr;       // the arrays' one allocation
  uint8_t* x_ = nullptr;        // x (forward) or x^T (backward)
  uint8_t* w_ = nullptr;        // w (forward) or w^T (backward)
  uint8_t* g_ = nullptr;        // dout
  uint8_t* g_t_ = nullptr;      // dout^T
  Marker mark_;
  void mark(const char* op, double flops = 0) const {
    if (mark_) mark_(op, flops);
  }
  int64_t max_act_ = 0, max_weight_ = 0, pending_id_ = -1;
  int margin_ = 0;
  int64_t steps_ = 0;
  size_t bytes_ = 0;
};

}  // namespace aiscale::cuda
