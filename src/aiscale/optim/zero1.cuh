// ZeRO-1 on the optimiser's side: the fp32 master weights and AdamW moments are sharded
// over the data-parallel ranks along the reducer's buckets (rank r owns the r-th equal
// part of every bucket, where the reduce-scatter leaves it the summed gradients), AdamW
// runs on those parts only, and an all-gather of the new working copy brings every rank
// the whole model again. Here rather than in the reducer because it is optimiser state
// and an optimiser step; the reducer only decides the parts (its bucket plan) and sums.
//
// Checkpoints see whole vectors: gather() assembles every rank's shard (collective) and
// scatter() keeps this rank's parts of a whole vector.
#pragma once
#include <cuda_runtime.h>

#include "aiscale/core/dtype.h"
#include "aiscale/ops/cuda/cuda_ops.cuh"
#include "aiscale/parallel/data_parallel/reducer.cuh"

namespace aiscale::optim {

class Zero1 {
 public:
  // `size` is the unpadded number of parameters.
  Zero1(parallel::dp::Reducer& reducer, int64_t size);
  ~Zero1();
  Zero1(const Zero1&) = delete;
  Zero1& operator=(const Zero1&) = delete;

  // Values of one rank's shard (master weights, m, v each).
  int64_t shard_size() const { return reducer_.plan().shard_size; }

  // AdamW on this rank's part of every bucket (`layout` says decay by flat index),
  // writing the new working copy (type t) in flat order into `flat_work` (padded size
  // values); then the all-gather completes it on every rank. The stream waits for it, so
  // work queued after this may copy flat_work into the model's own layout.
  void update(cuda::AdamWLayout layout, const ops::AdamWParams& hp, DType t, float* master,
              void* flat_work, const float* grads, float* m, float* v, cudaStream_t s);
  // This rank's parts of a whole host vector (size values) into a shard (device).
  void scatter(const float* full, float* shard, cudaStream_t s) const;
  // Every rank's shard, gathered into a whole host vector. Collective; `scratch` (device,
  // padded size floats: the gradient buffer) is overwritten.
  void gather(const float* shard, float* out, float* scratch, cudaStream_t s) const;

 private:
  parallel::dp::Reducer& reducer_;
  int64_t size_;
  cudaEvent_t update_done_ = nullptr, gathered_ = nullptr;
};

}  // namespace aiscale::optim
