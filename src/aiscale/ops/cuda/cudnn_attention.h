// Causal multi-head attention through cuDNN's fused flash-attention engines (cuDNN 9
// graph / backend API). The same layouts as attention_forward / attention_backward
// (cuda_ops.cuh): qkv (B, T, 3C) with Q, K, V side by side, out (B, T, C); heads of size
// HS = C / NH. The statistics are cuDNN's own (natural-log log-sum-exp of the scaled
// scores), so forward and backward of one layer must both go through this class.
//
// Optional at build time: without cuDNN (no cudnn.h / libcudnn found by CMake) the class
// exists, cudnn_attention_compiled() is false and the constructor throws.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "aiscale/core/dtype.h"

namespace aiscale::cuda {

// Whether this build has cuDNN; and the library version found at run time (e.g. 91400),
// 0 where none.
bool cudnn_attention_compiled();
int64_t cudnn_runtime_version();

class CudnnAttention {
 public:
  // Builds and finalises the forward and backward execution plans (cuDNN's heuristics,
  // first engine configuration that finalises). Throws aiscale::Error with cuDNN's
  // message where the shape, type or library is not supported (bf16 / fp16 only).
  // KVH < NH: grouped-query attention, qkv rows (B, T, C + 2 KVH HS) holding Q (NH heads),
  // K and V (KVH heads each), query head h reading KV head h / (NH / KVH); dK and dV are
  // summed over each group (0: KVH = NH).
  CudnnAttention(DType t, int64_t B, int64_t T, int64_t NH, int64_t HS, int64_t KVH = 0);
  ~CudnnAttention();
  CudnnAttention(const CudnnAttention&) = delete;
  CudnnAttention& operator=(const CudnnAttention&) = delete;

  // Device workspace both plans need (the larger of the two), bytes.
  size_t workspace_bytes() const;
  // "engine <fwd> / <bwd>, cuDNN <version>" for logs.
  std::string describe() const;

  // out (B, T, C); stats (B, NH, T) fp32.
  void forward(void* out, float* stats, const void* qkv, void* workspace, cudaStream_t s);
  // dqkv (B, T, 3C) overwritten. Scratch: dq_accum fp32 (B, T, C) (cuDNN's dQ
  // accumulator), softmax_sum fp32 (B, NH, T) (rowsum(dO * O)).
  void backward(void* dqkv, const void* dout, const void* qkv, const void* out,
                const float* stats, float* dq_accum, float* softmax_sum, void* workspace,
                cudaStream_t s);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace aiscale::cuda
