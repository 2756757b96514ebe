// One direction of a convolution as a one-operation cuDNN backend graph, run by the engine
// that was fastest on the caller's buffers among the heuristics' candidates.
//
// Why beside the legacy API (conv_cudnn.cu): the legacy algorithms reach only part of
// cuDNN's engines. Profiled on an H100 (ncu, ResNet-50 fp32 NHWC at batch 64), every
// legacy backward-data choice ran a grouped direct kernel of 10-30 ms per call, about 90 %
// of the steps' kernel time; the graph API's heuristics rank the engines that frameworks
// reach through it. CudnnConv times both and keeps the faster per direction.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>

#include "aiscale/core/dtype.h"
#include "aiscale/ops/vision/cuda/conv_cudnn.cuh"

namespace aiscale::cuda::vision {

enum class ConvDirection { forward, backward_data, backward_filter };

// How many engine configurations a search times.
//  - heuristics: the heuristics' ranked list (mode A), then the fallback list; up to 6
//    configurations (12 for real fp32, whose usable engines rank low), one per engine;
//    engines compiled at run time are skipped (seconds of start-up per shape).
//  - exhaustive: every configuration of modes A, B and the fallback list, knob variants
//    of one engine included, engines compiled at run time too, as a framework's benchmark
//    mode does; a longer start-up for the fastest engines.
enum class ConvSearch { heuristics, exhaustive };

class ConvGraphPlan {
 public:
  // Times the engine configurations `how` names that finalise within `workspace_bytes`
  // (fp32 without `tf32`: only engines without tensor cores, i.e. real FP32) on `bufs`
  // (overwritten), with output scaling beta = accumulate ? 1 : 0. Null when none runs.
  // handle: a cudnnHandle_t bound to stream s.
  static std::unique_ptr<ConvGraphPlan> search(void* handle, DType t, bool tf32,
                                               const ConvGeometry& g, ConvDirection dir,
                                               bool accumulate, const ConvBuffers& bufs,
                                               void* workspace, size_t workspace_bytes,
                                               cudaStream_t s, ConvSearch how);
  ~ConvGraphPlan();
  ConvGraphPlan(const ConvGraphPlan&) = delete;
  ConvGraphPlan& operator=(const ConvGraphPlan&) = delete;

  float time_ms() const;       // the best timed run
  size_t workspace() const;    // bytes the chosen engine needs
  int64_t engine() const;      // cuDNN's global engine index
  // At the geometry's full batch: forward (y; x, w), backward_data (dx; dy, w),
  // backward_filter (dw; dy, x). Returns false (running nothing) when a pointer is not
  // 16-byte aligned, as the graph's tensors promise.
  bool run(void* out, const void* in_a, const void* in_b, void* workspace, cudaStream_t s);

 private:
  ConvGraphPlan();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace aiscale::cuda::vision
