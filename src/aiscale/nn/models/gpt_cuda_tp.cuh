// Tensor parallelism of the CUDA GPT model (Megatron-style) over the tensor group's NCCL
// communicator: what a tensor rank exchanges and how its local buffers map to the whole
// model's flat vectors. The model (gpt_cuda.cu, gpt_cuda_backward.cu) computes on its
// local slices and calls in here at the four points of a layer that need the other ranks.
//
// What a rank holds (nn/models/gpt_shard.h):
// - the attention's QKV projection and the MLP's first layer column-split: rows of heads
//   [r NH/tp, (r+1) NH/tp) of each of Q, K and V, and rows [r 4C/tp, (r+1) 4C/tp) of the
//   MLP, with their biases;
// - the two output projections row-split: the matching input columns;
// - the token embedding with the tied LM head split by vocabulary rows (nn/models/gpt_shard.h:
//   rank r the token ids [r Vs, r Vs + its real rows), Vs = ceil(V / tp) rounded up to the
//   GEMMs' 128 rows, the last slices padded with zero rows): the embedding lookup of the
//   tokens a rank holds is summed over the ranks (the position embedding added by rank 0),
//   the LM head computes the rank's columns of the logits, and the softmax cross-entropy
//   combines the ranks' per-row (max, sum of exp, target logit) (gathered, N x 3 values a
//   rank) into the same loss on every rank and each rank's columns of dlogits; the LM
//   head's input gradient is a partial sum, all-reduced before the final LayerNorm's
//   backward;
// - everything else whole on every rank: LayerNorms, the output projections' biases, the
//   position embedding.
//
// Forward, the output of a row-parallel projection is a partial sum on each rank; only
// rank 0's GEMM epilogue adds the bias and the residual, so the in-place all-reduce
// (allreduce(), in the run's dtype, bf16 by default, like Megatron) leaves the whole
// residual stream on every rank. Backward mirrors it: the input gradients of the two
// column-parallel layers (d ln_1 and d ln_2 outputs) are partial sums, all-reduced before
// the LayerNorm backward. Every replicated computation then sees the same inputs on every
// rank and runs the same kernels (GEMM autotuning is off under tensor parallelism, so the
// ranks pick the same algorithms): the replicated parameters' gradients, and so the
// parameters, stay bitwise equal without any exchange of their own. get_params checks it.
//
// Data parallelism beside it (world = dp x tp; ZeRO 0 here, ZeRO-1 to 3 below): the job's
// ranks form dp copies of the tensor group, tensor ranks consecutive (parallel/grid.h's default
// order), and the ranks with the same tensor rank form a data-parallel group. Each rank's
// local gradient buffer (its slices and the replicated tensors) is summed over its
// data-parallel group after the backward of a synchronising step (sum_gradients(): one fp32
// all-reduce on the data group's stream, ordered after backward by an event, the model's
// stream waiting for it on the GPU). The tensor ranks of one copy hold the same replicated
// gradients and their data groups add the same values (exactly alike with two copies, where
// a + b = b + a; with more, as NCCL orders its sums alike in groups of the same shape,
// which get_params checks), so the replicated parameters stay equal across the tensor
// group. The summed gradients' norm is grad_sum_squares over the tensor group as before:
// the whole model's.
//
// ZeRO-1 beside it (dp x tp, parallel.zero_stage = 1): optim/zero1.cuh without a reducer
// shards each rank's local buffer over its data group (one bucket: the local buffer padded
// to a multiple of dp, data rank d owning its d-th part). The gradients are reduce-scattered
// over the data group instead of all-reduced (the same event ordering as sum_gradients), the
// fp32 master weights and AdamW moments hold only that part (1/dp of the tensor-local
// parameters), AdamW runs on it and the new working copy is all-gathered over the data group.
// The norm (sharded_grad_sum_squares) takes each rank's part only, adds the split and the
// replicated squares over the data group, then the split ones over the tensor group: the
// same total as without ZeRO. The tensor ranks' local buffers have the same length and
// their replicated tensors the same offsets, so every data group cuts its buffer alike and
// the replicated parameters stay equal across the tensor group.
//
// ZeRO-2 and ZeRO-3 beside it (parallel.zero_stage = 2, 3): nn/models/gpt_zero3.cuh over the data
// group with this rank's local buffer as its model: the layers' slices gathered over the
// data group (ZeRO-3: right before each layer computes; ZeRO-2: once per step), each
// layer's gradients reduce-scattered into the shards after its backward, nothing summed
// here. The tensor group's all-reduces run on its communicator's stream, the gathers and
// reduce-scatters on the data group's; both are ordered against the model's stream by
// events, which orders them with each other. The norm is Zero3's: the shards' squares,
// split and replicated apart, summed over the data group, the split ones over the tensor
// group. Under sequence parallelism each layer's LayerNorm gradients are summed over the
// tensor ranks right after its backward (every micro-step), before the layer is
// reduce-scattered. Not with the optimizer state on the host.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "aiscale/core/dtype.h"
#include "aiscale/nn/models/gpt_shard.h"
#include "aiscale/ops/cuda/cuda_ops.cuh"
#include "aiscale/parallel/comm.h"

namespace aiscale::nn::detail {

class GptCudaTensorParallel {
 public:
  // comm: the tensor group (a device communicator, NCCL); data: this rank's data-parallel
  // group (a device communicator; null or one rank: a single copy); layout: this rank's
  // slices (must outlive this object); t: the activations' dtype; stream: the model's stream.
  GptCudaTensorParallel(parallel::Communicator& comm, parallel::Communicator* data,
                        const GptShardLayout& layout, DType t, cudaStream_t stream);
  ~GptCudaTensorParallel();
  GptCudaTensorParallel(const GptCudaTensorParallel&) = delete;
  GptCudaTensorParallel& operator=(const GptCudaTensorParallel&) = delete;

  int tp() const { return layout_.tp(); }
  int rank() const { return layout_.rank(); }
  // Rank 0 adds the row-parallel layers' biases and the residual in its GEMM epilogues.
  bool adds_bias() const { return layout_.rank() == 0; }

  // In-place sum over the tensor ranks of n values of the run's dtype at `data` (device),
  // after the work queued on the model's stream; the model's stream then waits for it on
  // the GPU (the host does not wait).
  void allreduce(void* data, int64_t n);
  // Sequence parallelism, in place and ordered the same way: `data` holds tp() parts of
  // `count` values of the run's dtype, this rank's at [rank() * count, ...). allgather:
  // every rank's part arrives in its place; reduce_scatter: this rank's part becomes the
  // sum over the ranks of theirs (the rest is left undefined).
  void allgather(void* data, int64_t count);
  void reduce_scatter(void* data, int64_t count);
  // In-place fp32 sum over the tensor ranks (the LayerNorms' gradients under sequence
  // parallelism), ordered the same way.
  void allreduce_f32(float* data, int64_t n);
  // allgather of fp32 values (the vocabulary-parallel softmax's per-row statistics).
  void allgather_f32(float* data, int64_t count);
  // Bounded wait for the queued all-reduces (both groups'): a peer that stopped fails this
  // rank (after the communicator's timeout) instead of leaving the GPU waiting for ever.
  void finish();

  // Data-parallel copies of the tensor group: their number and this rank's copy.
  int dp() const { return data_ ? data_->world() : 1; }
  int dp_rank() const { return data_ ? data_->rank() : 0; }
  // The data-parallel group (null with one copy), for ZeRO's shards over it, and the
  // tensor group (ZeRO-2/3's gradient norm).
  parallel::Communicator* data_group() const { return data_; }
  parallel::Communicator& tensor_group() const { return comm_; }
  // In-place fp32 sum over the data-parallel group of n gradient values at `grads`
  // (device), after the work queued on the model's stream, which then waits for it on the
  // GPU. Nothing with one copy.
  void sum_gradients(float* grads, int64_t n);

  // Sum of squares of the whole model's gradients from this rank's local gradients
  // (collective): the split tensors' summed over the ranks, the replicated ones counted
  // once. Deterministic (fixed-order sums).
  double grad_sum_squares(const float* grads);
  // The same where the gradients were reduce-scattered over the data group (ZeRO-1): only
  // [begin, end) of the local buffer holds summed values on this rank; the squares of
  // those ranges are added over the data group (collective over both groups).
  double sharded_grad_sum_squares(const float* grads, int64_t begin, int64_t end);
  // The same over [begin, end) of the local buffer only (a pipeline stage's layers, or the
  // embeddings and the final norm that stage 0 counts for the pipeline); collective over
  // the tensor group.
  double range_grad_sum_squares(const float* grads, int64_t begin, int64_t end);

  // Whole flat vector (GptLayout order) on the host <-> this rank's local buffer (device,
  // layout().size() fp32 values). gather is a collective (every rank calls it, all get
  // the whole vector); scatter is not.
  void gather(const float* local_dev, float* full_host);
  void scatter(const float* full_host, float* local_dev);
  // gather from a local vector on the host (ZeRO-2/3 gather it over the data group there).
  void gather_host(const float* local_host, float* full_host);
  // Whether `hash` (of the replicated values a rank read) is the same on every tensor rank
  // (collective): a checkpoint's check that they stayed bitwise equal.
  bool same_on_every_rank(uint64_t hash);

 private:
  std::vector<float> download(const float* local_dev);
  template <typename Queue>
  void ordered(Queue&& queue);
  double sum_squares(const float* grads, int64_t begin, int64_t end, bool over_data);

  parallel::Communicator& comm_;
  parallel::Communicator* data_ = nullptr;  // null with one data-parallel copy
  const GptShardLayout& layout_;
  DType t_;
  cudaStream_t stream_;
  cudaEvent_t ready_ = nullptr, done_ = nullptr, data_done_ = nullptr;
  // grad_sum_squares: the local buffer in chunks of at most kChunk values inside one
  // tensor each (device table), one partial sum per chunk, the two totals (split,
  // replicated) on the device and in pinned host memory.
  int64_t chunks_ = 0;
  void* chunk_table_ = nullptr;
  double* partials_ = nullptr;
  double* totals_ = nullptr;
  double* host_totals_ = nullptr;
};

}  // namespace aiscale::nn::detail
