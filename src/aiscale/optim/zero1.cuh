// ZeRO-1 on the optimiser's side: the fp32 master weights and AdamW moments are sharded
// over the data-parallel ranks along the gradient buckets (rank r owns the r-th equal
// part of every bucket, where the reduce-scatter leaves it the summed gradients), AdamW
// runs on those parts only, and an all-gather of the new working copy brings every rank
// the whole model again. Here rather than in the reducer because it is optimiser state
// and an optimiser step; the reducer only decides the parts (its bucket plan) and sums.
//
// Two ways in:
// - plain data parallelism: the reducer's buckets, reduce-scattered by the reducer during
//   backward, and its transport (NCCL or the copy engines) for the all-gather;
// - data-parallel copies of a tensor group (dp x tp, nn/models/gpt_cuda_tp.cuh), which have
//   no reducer: one bucket over this rank's whole local gradient buffer (padded to a
//   multiple of the data group's size), reduce-scattered by reduce_scatter() after backward
//   on the data group's device communicator.
//
// Checkpoints see whole vectors: gather() assembles every rank's shard (collective) and
// scatter() keeps this rank's parts of a whole vector; or (the GPT model's streamed
// checkpoints) a range at a time through owned_runs(), which says where this rank keeps the
// values of a range.
#pragma once
#include <cuda_runtime.h>

#include <array>
#include <functional>
#include <utility>
#include <vector>

#include "aiscale/core/dtype.h"
#include "aiscale/ops/cuda/cuda_ops.cuh"
#include "aiscale/parallel/data_parallel/bucket_plan.h"
#include "aiscale/parallel/data_parallel/reducer.cuh"

namespace aiscale::optim {

class Zero1 {
 public:
  // `size` is the unpadded number of parameters. Along the reducer's buckets:
  Zero1(parallel::dp::Reducer& reducer, int64_t size);
  // Without a reducer: one bucket, over `data` (a device communicator of several ranks).
  Zero1(parallel::Communicator& data, int64_t size);
  ~Zero1();
  Zero1(const Zero1&) = delete;
  Zero1& operator=(const Zero1&) = delete;

  // Values of one rank's shard (master weights, m, v each), and the gradient buffer's
  // length (size rounded up to a multiple of the ranks; the tail must stay zero).
  int64_t shard_size() const { return plan().shard_size; }
  int64_t padded_size() const { return plan().padded_size; }
  const std::vector<parallel::dp::Bucket>& buckets() const { return plan().buckets; }
  // The flat range [first, second) of bucket b this rank owns (empty past the end).
  std::pair<int64_t, int64_t> owned(const parallel::dp::Bucket& b) const;
  // Calls fn(flat, index, n) for each run of flat positions [begin, end) this rank owns, in
  // order: flat positions [flat, flat + n) are at [index, index + n) of its shard.
  void owned_runs(int64_t begin, int64_t end,
                  const std::function<void(int64_t, int64_t, int64_t)>& fn) const;

  // Without a reducer: the in-place fp32 reduce-scatter of the gradient buffer (padded
  // size values) over the data group, after the work queued on `s`, which then waits for
  // it on the GPU; this rank's parts hold the sums afterwards, the rest is undefined.
  void reduce_scatter(float* grads, cudaStream_t s);

  // AdamW on this rank's part of every bucket (`layout` says decay by flat index),
  // writing the new working copy (type t) in flat order into `flat_work` (padded size
  // values); then the all-gather completes it on every rank. The stream waits for it, so
  // work queued after this may copy flat_work into the model's own layout.
  void update(cuda::AdamWLayout layout, const ops::AdamWParams& hp, DType t, float* master,
              void* flat_work, const float* grads, float* m, float* v, cudaStream_t s);
  // Any optimizer the same way: `step(lo, hi, state_offset)` queues on `s` the update of
  // the flat range [lo, hi) this rank owns, its state at state_offset of the shard; then
  // the all-gather of `flat` (padded size values of `t`, in flat order) completes the
  // updated values on every rank, and `s` waits for it. (The ResNets' SGD, whose working
  // copy is the fp32 parameters.)
  void update_parts(const std::function<void(int64_t lo, int64_t hi, int64_t state_offset)>& step,
                    DType t, void* flat, cudaStream_t s);
  // This rank's parts of a whole vector (size values, host or device memory) into a
  // shard (device).
  void scatter(const float* full, float* shard, cudaStream_t s) const;
  // Every rank's shard, gathered into a whole host vector. Collective; `scratch` (device,
  // padded size floats: the gradient buffer) is overwritten.
  void gather(const float* shard, float* out, float* scratch, cudaStream_t s) const;

 private:
  const parallel::dp::BucketPlan& plan() const { return reducer_ ? reducer_->plan() : plan_; }
  parallel::Communicator& transport() const { return reducer_ ? reducer_->transport() : *data_; }
  // Bounded wait for the collectives queued so far (the reducer's or the data group's).
  void finish() const;

  parallel::dp::Reducer* reducer_ = nullptr;  // null: data-parallel copies of a tensor group
  parallel::Communicator* data_ = nullptr;    // without a reducer: the data group
  parallel::dp::BucketPlan plan_;             // without a reducer: one bucket
  int rank_ = 0, world_ = 1;
  int64_t size_;
  // This rank's parts (flat begin, end, shard offset) sorted by position, for owned_runs.
  mutable std::vector<std::array<int64_t, 3>> parts_;
  cudaEvent_t update_done_ = nullptr, gathered_ = nullptr, grads_ready_ = nullptr,
              reduced_ = nullptr;
};

}  // namespace aiscale::optim
