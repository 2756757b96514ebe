// Pipeline parallelism of the CUDA GPT model over device point-to-point (NCCL's, or MPI's
// and TCP's staged through host memory: parallel/host_staged.cpp): what a stage holds
// and how its passes are ordered across the GPUs. The passes themselves (stage_forward,
// stage_backward) are the model's (gpt_cuda_pp.cu).
//
// Each stage computes a contiguous range of layers (parallel/pipeline/schedule.h's
// stage_layers, as on CPU ranks), the first stage also the embeddings, the last the final
// LayerNorm, the LM head and the loss. The batch is split into `microbatches`; the model's
// single set of activation buffers is sized for one micro-batch, and every micro-batch's
// backward first re-runs the stage's forward from its input kept in a stash (full
// recomputation per stage; skipped when the buffers still hold that micro-batch, as on the
// last stage of 1F1B), so GPipe and 1F1B are only two orders of the same two passes.
//
// What a stage holds: the parameters, gradients and AdamW state of its layers, of the
// embeddings and of the final norm (the GPT layout cut to the stage: gpt_shard.h), and
// activation buffers for its layers only. The embeddings and the final norm are on every
// stage so that all stages update them alike: after backward the stage's gradients are
// summed over its data-parallel copies (fp32 all-reduce over the data group), then the
// embeddings' and the final norm's over the stages (the first stage's embedding backward
// and the last stage's LM head and norm; zeros elsewhere), and every stage runs AdamW on
// what it holds. The gradient norm counts each value once (the stages' layers, stage 0's
// embeddings and norm); checkpoints gather the stages' layers into the whole model.
//
// Ordering. Two NCCL communicators over the pipeline's ranks, each with its own stream:
// `forward` carries the activations downstream, `backward` the gradients upstream, so each
// communicator's sends and receives between two stages are posted in the same order on
// both sides (micro-batch order) and neither direction waits behind the other. The model's
// stream and the communicators' streams wait for each other only through CUDA events; the
// host never waits inside a step (it queues the whole schedule, then waits once at the
// end), so a stage never blocks its peers' hosts:
// - a receive waits (on its communicator's stream) until the stash slot or gradient buffer
//   it writes is free again, the model's stream waits for the receive before reading it;
// - a send waits for the model's event after the pass that wrote the data; the model's
//   stream waits for the send to have left before it writes that buffer again.
// The model stream's waits on the other stages are timed with CUDA events: their sum is
// pipeline_wait_s() (the bubble as this rank saw it).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "aiscale/nn/models/gpt_cuda.cuh"
#include "aiscale/parallel/comm.h"

namespace aiscale::nn::detail {

struct GptCudaPipelineSizes {
  int64_t tokens = 0;        // tokens of the whole batch (B T)
  int64_t boundary_bytes = 0;  // one micro-batch's activations between stages (rows T C t)
  size_t bucket_ints = 0;    // one micro-batch's embedding-backward buckets
};

class GptCudaPipeline {
 public:
  // group: the pipeline group (a device communicator of several ranks; must outlive
  // this); plan: this stage's layers and schedule. Splits a second communicator off the
  // group (collective over the group) and connects each stage to its neighbours.
  GptCudaPipeline(parallel::Communicator& group, const GptCudaPipelinePlan& plan,
                  const GptCudaPipelineSizes& z);
  ~GptCudaPipeline();
  GptCudaPipeline(const GptCudaPipeline&) = delete;
  GptCudaPipeline& operator=(const GptCudaPipeline&) = delete;

  int stage() const { return stage_; }
  int stages() const { return stages_; }
  bool first() const { return stage_ == 0; }
  bool last() const { return stage_ + 1 == stages_; }
  int micro() const { return plan_.microbatches; }
  int64_t layer_begin() const { return plan_.layer_begin; }
  int64_t layer_end() const { return plan_.layer_end; }
  const std::vector<GptCudaPipelinePlan::Pass>& schedule() const { return plan_.passes; }
  int slot(int m) const { return m % plan_.slots; }
  size_t bytes() const { return device_bytes_; }

  parallel::Communicator& forward_comm() { return group_; }
  parallel::Communicator& backward_comm() { return *backward_; }

  // Queues on `comm`'s stream: a wait for `event` (recorded on the model's stream).
  static void comm_waits(parallel::Communicator& comm, cudaEvent_t event);
  // The model's stream waits for `event` (another stage's data); the wait is timed.
  void stall(cudaStream_t model, cudaEvent_t event);
  // Starts a step: forgets the last step's timed waits.
  void begin_step() { timed_ = 0; }
  // After the model's stream is idle: the seconds its timed waits took this step.
  double waited_s() const;
  // Bounded wait for both communicators' queued sends and receives.
  void finish();

  // Device buffers.
  void* stash(int slot) const { return static_cast<char*>(stash_) + int64_t(slot) * z_.boundary_bytes; }
  void* grad_in() const { return grad_in_; }
  int32_t* tokens() const { return tokens_; }                  // inputs, then targets (B T each)
  int32_t* buckets(int m) const { return buckets_ + size_t(m) * z_.bucket_ints; }
  float* losses() const { return losses_; }                     // micro + 1 (the last: scratch)
  // Pinned host staging of the same.
  int32_t* host_tokens() const { return h_tokens_; }
  int32_t* host_buckets(int m) const { return h_buckets_ + size_t(m) * z_.bucket_ints; }
  float* host_losses() const { return h_losses_; }
  std::vector<int64_t>& unique_tokens() { return num_unique_; }  // per micro-batch

  // Events: a stash slot free again / received into; the stage's output ready / sent; the
  // received output gradient's buffer free / filled; the input gradient ready / sent.
  cudaEvent_t slot_free(int s) const { return slot_free_[size_t(s)]; }
  cudaEvent_t slot_filled(int s) const { return slot_filled_[size_t(s)]; }
  cudaEvent_t out_ready = nullptr, out_sent = nullptr;
  cudaEvent_t grad_in_free = nullptr, grad_in_filled = nullptr;
  cudaEvent_t grad_out_ready = nullptr, grad_out_sent = nullptr;
  // Micro-batch whose activations the model's buffers hold (-1: none).
  int held = -1;

 private:
  void connect(parallel::Communicator& comm);

  parallel::Communicator& group_;
  std::unique_ptr<parallel::Communicator> backward_;
  int stage_ = 0, stages_ = 1;
  GptCudaPipelinePlan plan_;
  GptCudaPipelineSizes z_;
  void* device_ = nullptr;
  size_t device_bytes_ = 0;
  void *stash_ = nullptr, *grad_in_ = nullptr, *probe_ = nullptr;
  int32_t *tokens_ = nullptr, *buckets_ = nullptr;
  float* losses_ = nullptr;
  void* host_ = nullptr;
  int32_t *h_tokens_ = nullptr, *h_buckets_ = nullptr;
  float* h_losses_ = nullptr;
  std::vector<int64_t> num_unique_;
  std::vector<cudaEvent_t> slot_free_, slot_filled_;
  std::vector<cudaEvent_t> timing_;  // pairs around each timed wait
  size_t timed_ = 0;                 // pairs used this step
};

}  // namespace aiscale::nn::detail
