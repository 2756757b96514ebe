// 2-D convolutions of NHWC activations through cuDNN 9: forward, backward-data and
// backward-filter, with the algorithm of each chosen once per shape by timing cuDNN's
// candidates on the caller's own buffers and workspace: the legacy API's algorithms
// (cudnnFind*AlgorithmEx), then the graph API's engines (conv_cudnn_graph.cuh), keeping a
// graph engine where it is faster at the full batch (other batches use the legacy API). Filters are OHWI (cuDNN's NHWC filter format); math type: fp32
// without TF32 unless `tf32`, 16-bit types on tensor cores, accumulation in fp32 always.
//
// Optional at build time like the attention engines: without cuDNN the class exists,
// vision_cudnn_compiled() is false and the constructor throws, naming the fix.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "aiscale/core/dtype.h"
#include "aiscale/core/non_copyable.h"

namespace aiscale::cuda::vision {

bool vision_cudnn_compiled();

struct ConvGeometry {
  int64_t N = 0, C = 0, H = 0, W = 0, OC = 0, K = 1, stride = 1, pad = 0;
  int64_t OH() const { return (H + 2 * pad - K) / stride + 1; }
  int64_t OW() const { return (W + 2 * pad - K) / stride + 1; }
  bool operator==(const ConvGeometry& o) const {
    return N == o.N && C == o.C && H == o.H && W == o.W && OC == o.OC && K == o.K &&
           stride == o.stride && pad == o.pad;
  }
};

// One cuDNN handle for a model, bound to its stream.
class CudnnContext : NonCopyable {
 public:
  explicit CudnnContext(cudaStream_t stream);
  ~CudnnContext();
  void* handle() const { return handle_; }  // cudnnHandle_t

 private:
  void* handle_ = nullptr;
};

// The buffers the algorithm search runs on (contents are overwritten: call before the
// weights and gradients that matter are in place). dx may be null (no backward-data).
struct ConvBuffers {
  void* x = nullptr;
  void* w = nullptr;
  void* y = nullptr;
  void* dx = nullptr;
  void* dw = nullptr;
};

class CudnnConv {
 public:
  // Chooses the algorithms for g (at its batch N) within `workspace_bytes` of `workspace`.
  CudnnConv(CudnnContext& ctx, DType t, bool tf32, const ConvGeometry& g, bool backward_data,
            const ConvBuffers& search, void* workspace, size_t workspace_bytes);
  ~CudnnConv();
  CudnnConv(const CudnnConv&) = delete;
  CudnnConv& operator=(const CudnnConv&) = delete;

  // Largest workspace the chosen algorithms need (<= the limit given).
  size_t workspace_bytes() const;
  // "fwd A / bwd-data B / bwd-filter C[, K graph engine(s)]" for logs.
  std::string describe() const;
  // How many directions run a graph-API engine (conv_cudnn_graph.cuh) at the full batch.
  int graph_engines() const;

  // Each call runs at batch n <= the geometry's N (another n re-chooses by heuristics).
  // y = conv(x, w).
  void forward(void* y, const void* x, const void* w, int64_t n, void* workspace,
               cudaStream_t s);
  // dx = conv_transpose(dy, w), overwritten or (accumulate) added.
  void backward_data(void* dx, const void* dy, const void* w, int64_t n, bool accumulate,
                     void* workspace, cudaStream_t s);
  // dw = dy^T x over the batch, overwritten or (accumulate) added; dw has type t.
  void backward_filter(void* dw, const void* dy, const void* x, int64_t n, bool accumulate,
                       void* workspace, cudaStream_t s);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace aiscale::cuda::vision
