// What a model publishes so that a data-parallel reducer outside it can sum its gradients
// while backward goes on: the order in which backward completes the parts of its flat
// gradient buffer. Each segment is a range of that buffer and the named point of backward
// after which it is complete; the model announces each point as backward passes it
// (GradientReadyListener), with the stream its kernels run on. The contract lives here,
// beside the reducer that reads it, so that parallel/ knows nothing of nn/'s models
// (docs/design/layers.md).
//
// Included by CUDA sources (C++17).
#pragma once
#include <cstdint>
#include <vector>

namespace aiscale::parallel::dp {

struct GradientSegment {
  int64_t begin = 0, end = 0;  // flat range of the gradient buffer
  int point = 0;               // the model's name for the point of backward that completes it
  // A bucket ends with this segment whatever its size (the model wants the parts before
  // and after it summed separately, e.g. to shorten what stays exposed after backward).
  bool cut_after = false;
  // When bucket boundaries must fall on multiples of the world size (ZeRO-1), the cut at
  // `begin` is rounded: down (the values just below it join this segment's bucket: the
  // model guarantees they are complete at `point` too) or up (values of this segment join
  // the next bucket, which completes later).
  bool round_begin_up = false;
};

// Segments in the order backward completes them; together they tile [0, size).
using GradientOrder = std::vector<GradientSegment>;

// The model's side of the subscription: it calls gradients_ready(point, stream) when the
// work that completes the segments of `point` has been queued on `stream` (a cudaStream_t,
// void* here so that host code can name it); work queued after the call no longer writes
// them, unless the model says otherwise (the embeddings' gathered backward, see
// parallel/data_parallel/reducer.cuh).
class GradientReadyListener {
 public:
  virtual ~GradientReadyListener() = default;
  virtual void gradients_ready(int point, void* stream) = 0;
};

}  // namespace aiscale::parallel::dp
