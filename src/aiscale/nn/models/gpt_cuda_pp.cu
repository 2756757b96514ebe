// Pipeline parallelism of the CUDA GPT model (gpt_cuda_pp.cuh): the stage's resources and
// the model's pipelined passes over the micro-batches.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>

#include "aiscale/nn/models/gpt_cuda_model.cuh"
#include "aiscale/nn/models/gpt_cuda_pp.cuh"
#include "aiscale/ops/cuda/common.cuh"

namespace aiscale::nn::detail {

namespace {
size_t round_up(size_t n) { return (n + 255) / 256 * 256; }
cudaEvent_t make_event(bool timing) {
  cudaEvent_t e = nullptr;
  AISCALE_CUDA_CHECK(cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming));
  return e;
}
}  // namespace

GptCudaPipeline::GptCudaPipeline(parallel::Communicator& group, const GptCudaPipelinePlan& plan,
                                 const GptCudaPipelineSizes& z)
    : group_(group), stage_(group.rank()), stages_(group.world()), plan_(plan), z_(z) {
  const int slots = plan.slots, micro = plan.microbatches;
  // Device: the stash, the received output gradient, the batch's tokens, the micro-batches'
  // embedding buckets, the losses and a probe for the connections; host: their staging.
  const size_t stash = round_up(size_t(slots) * size_t(z.boundary_bytes));
  const size_t grad = round_up(size_t(z.boundary_bytes));
  const size_t tokens = round_up(size_t(2 * z.tokens) * 4);
  const size_t buckets = round_up(size_t(micro) * z.bucket_ints * 4);
  const size_t losses = round_up(size_t(micro + 1) * 4);
  const size_t probe = 256;
  device_bytes_ = stash + grad + tokens + buckets + losses + probe;
  AISCALE_CUDA_CHECK(cudaMalloc(&device_, device_bytes_));
  char* d = static_cast<char*>(device_);
  stash_ = d, d += stash;
  grad_in_ = d, d += grad;
  tokens_ = reinterpret_cast<int32_t*>(d), d += tokens;
  buckets_ = reinterpret_cast<int32_t*>(d), d += buckets;
  losses_ = reinterpret_cast<float*>(d), d += losses;
  probe_ = d;
  AISCALE_CUDA_CHECK(cudaMallocHost(&host_, tokens + buckets + losses));
  char* h = static_cast<char*>(host_);
  h_tokens_ = reinterpret_cast<int32_t*>(h), h += tokens;
  h_buckets_ = reinterpret_cast<int32_t*>(h), h += buckets;
  h_losses_ = reinterpret_cast<float*>(h);
  num_unique_.assign(size_t(micro), 0);
  for (int s = 0; s < slots; ++s) {
    slot_free_.push_back(make_event(false));
    slot_filled_.push_back(make_event(false));
  }
  for (cudaEvent_t* e : {&out_ready, &out_sent, &grad_in_free, &grad_in_filled, &grad_out_ready,
                         &grad_out_sent})
    *e = make_event(false);
  // At most five timed waits per micro-batch: its input received, its output's buffer
  // free (forward and recomputation), its output gradient received, its input gradient's
  // buffer free.
  for (int i = 0; i < 10 * micro; ++i) timing_.push_back(make_event(true));
  // The gradients travel upstream on a communicator of their own (same ranks, same order).
  backward_ = group_.split(0, stage_);
  connect(group_);
  connect(*backward_);
}

GptCudaPipeline::~GptCudaPipeline() {
  try {
    finish();
  } catch (...) {  // a failed peer: the run is ending anyway
  }
  for (auto* v : {&slot_free_, &slot_filled_, &timing_})
    for (cudaEvent_t e : *v) cudaEventDestroy(e);
  for (cudaEvent_t e : {out_ready, out_sent, grad_in_free, grad_in_filled, grad_out_ready, grad_out_sent})
    if (e) cudaEventDestroy(e);
  backward_.reset();
  if (host_) cudaFreeHost(host_);
  if (device_) cudaFree(device_);
}

// NCCL connects two ranks on their first point-to-point call; a connecting rank waits for
// its peer. One grouped exchange with both neighbours at construction, where every stage
// takes part at once, makes those connections (and proves the path) before any step.
void GptCudaPipeline::connect(parallel::Communicator& comm) {
  char* p = static_cast<char*>(probe_);
  AISCALE_CUDA_CHECK(cudaMemset(p, 0, 64));
  comm.group_begin();
  if (stage_ + 1 < stages_) {
    comm.send_after(p, 4, stage_ + 1);
    comm.recv_after(p + 16, 4, stage_ + 1);
  }
  if (stage_ > 0) {
    comm.send_after(p + 32, 4, stage_ - 1);
    comm.recv_after(p + 48, 4, stage_ - 1);
  }
  comm.group_end();
  comm.wait();
}

void GptCudaPipeline::comm_waits(parallel::Communicator& comm, cudaEvent_t event) {
  AISCALE_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(comm.device_stream()), event, 0));
}

void GptCudaPipeline::stall(cudaStream_t model, cudaEvent_t event) {
  const bool timed = 2 * timed_ + 2 <= timing_.size();
  if (timed) AISCALE_CUDA_CHECK(cudaEventRecord(timing_[2 * timed_], model));
  AISCALE_CUDA_CHECK(cudaStreamWaitEvent(model, event, 0));
  if (timed) AISCALE_CUDA_CHECK(cudaEventRecord(timing_[2 * timed_ + 1], model));
  if (timed) ++timed_;
}

double GptCudaPipeline::waited_s() const {
  double s = 0;
  for (size_t i = 0; i < timed_; ++i) {
    float ms = 0;
    AISCALE_CUDA_CHECK(cudaEventElapsedTime(&ms, timing_[2 * i], timing_[2 * i + 1]));
    s += double(ms) / 1e3;
  }
  return s;
}

void GptCudaPipeline::finish() {
  group_.wait();
  if (backward_) backward_->wait();
}

// ---------------------------------------------------------------------------------------
// The model's pipelined passes.

float GptCuda::forward(const int32_t* inputs, const int32_t* targets) {
  return pp_ ? pipeline_forward(inputs, targets) : forward_batch(inputs, targets);
}

void GptCuda::backward(float grad_multiplier) {
  if (pp_) throw Error("a pipeline runs its backward passes inside forward_backward() (its schedule)");
  backward_batch(grad_multiplier);
}

float GptCuda::forward_backward(const int32_t* inputs, const int32_t* targets,
                                float grad_multiplier) {
  if (pp_) return pipeline_forward_backward(inputs, targets, grad_multiplier);
  return GptModel::forward_backward(inputs, targets, grad_multiplier);
}

void GptCuda::pipeline_take_batch(const int32_t* inputs, const int32_t* targets) {
  GptCudaPipeline& p = *pp_;
  const int64_t all = N_ * p.micro();
  for (int64_t i = 0; i < all; ++i) {
    if (inputs[i] < 0 || inputs[i] >= config_.vocab_size)
      throw Error("token id " + std::to_string(inputs[i]) + " at position " + std::to_string(i) +
                  " is outside the vocabulary 0.." + std::to_string(config_.vocab_size - 1) +
                  ": the data does not match model.vocab_size");
    if (targets && (targets[i] < 0 || targets[i] >= config_.vocab_size))
      throw Error("target id " + std::to_string(targets[i]) + " at position " + std::to_string(i) +
                  " is outside the vocabulary 0.." + std::to_string(config_.vocab_size - 1));
  }
  // The last step ended with the stream idle: the staging is free.
  std::memcpy(p.host_tokens(), inputs, size_t(all) * 4);
  if (targets) std::memcpy(p.host_tokens() + all, targets, size_t(all) * 4);
  AISCALE_CUDA_CHECK(cudaMemcpyAsync(p.tokens(), p.host_tokens(), size_t(targets ? 2 : 1) * all * 4,
                                     cudaMemcpyHostToDevice, stream_));
  if (!p.first() || !targets) return;
  // The embedding backward's token positions grouped by id, per micro-batch.
  const int64_t Nb = bucket_capacity();
  for (int m = 0; m < p.micro(); ++m) {
    int32_t* b = p.host_buckets(m);
    p.unique_tokens()[size_t(m)] = cuda::build_token_buckets(
        inputs + m * N_, N_, shard_.vocab_rows(), b, b + Nb, b + 2 * Nb + 1, bucket_counts_,
        shard_.vocab_begin());
  }
  AISCALE_CUDA_CHECK(cudaMemcpyAsync(p.buckets(0), p.host_buckets(0),
                                     size_t(p.micro()) * bucket_ints() * 4,
                                     cudaMemcpyHostToDevice, stream_));
}

// The stage's forward of micro-batch m on the model's buffers: from the tokens (first
// stage) or the stash (the receive of a forward pass must have been queued), through its
// layers, to the loss (last stage, into losses()[loss_slot], dlogits scaled for
// grad_multiplier). fresh: a forward pass (its receive is waited for and timed), else a
// recomputation before backward.
void GptCuda::stage_compute(int m, float grad_multiplier, bool fresh, int loss_slot) {
  GptCudaPipeline& p = *pp_;
  cudaStream_t s = stream_;
  const int slot = p.slot(m);
  if (p.first()) {
    prof_op("embedding_forward");
    embedding_forward(p.tokens() + m * N_);
  } else {
    if (fresh) p.stall(s, p.slot_filled(slot));
    AISCALE_CUDA_CHECK(cudaMemcpyAsync(res(p.layer_begin()), p.stash(slot),
                                       size_t(boundary_rows() * C_) * es_,
                                       cudaMemcpyDeviceToDevice, s));
  }
  if (!p.last()) p.stall(s, p.out_sent);  // res(end) has left for the next stage
  layers_forward(p.layer_begin(), p.layer_end());
  if (p.last()) {
    head_forward();
    loss_forward(p.tokens() + N_ * p.micro() + m * N_, grad_multiplier, p.losses() + loss_slot);
  }
  prof_op(nullptr);
  p.held = m;
}

void GptCuda::stage_forward(int m, float grad_multiplier, bool training) {
  GptCudaPipeline& p = *pp_;
  const int slot = p.slot(m);
  const int64_t bytes = boundary_rows() * C_ * int64_t(es_);
  if (!p.first()) {  // into the stash slot, once its last micro-batch has been read
    parallel::Communicator& in = p.forward_comm();
    GptCudaPipeline::comm_waits(in, p.slot_free(slot));
    in.recv_after(p.stash(slot), bytes, p.stage() - 1);
    in.record(p.slot_filled(slot));
  }
  stage_compute(m, grad_multiplier, true, m);
  // Without a backward (evaluation) the stash is free once copied.
  if (!training && !p.first()) AISCALE_CUDA_CHECK(cudaEventRecord(p.slot_free(slot), stream_));
  if (!p.last()) {
    parallel::Communicator& out = p.forward_comm();
    AISCALE_CUDA_CHECK(cudaEventRecord(p.out_ready, stream_));
    GptCudaPipeline::comm_waits(out, p.out_ready);
    out.send_after(res(p.layer_end()), bytes, p.stage() + 1);
    out.record(p.out_sent);
  }
}

void GptCuda::stage_backward(int m, float grad_multiplier) {
  GptCudaPipeline& p = *pp_;
  cudaStream_t s = stream_;
  const int64_t bytes = boundary_rows() * C_ * int64_t(es_);
  parallel::Communicator& grads = p.backward_comm();
  if (!p.last()) {  // queued first: it arrives while the stage recomputes
    GptCudaPipeline::comm_waits(grads, p.grad_in_free);
    grads.recv_after(p.grad_in(), bytes, p.stage() + 1);
    grads.record(p.grad_in_filled);
  }
  if (p.held != m) stage_compute(m, grad_multiplier, false, p.micro());
  if (!p.first()) AISCALE_CUDA_CHECK(cudaEventRecord(p.slot_free(p.slot(m)), s));
  p.held = -1;  // backward overwrites what it recomputes and consumes the logits
  if (!p.first()) p.stall(s, p.grad_out_sent);  // dres_ has left for the previous stage
  if (p.last()) {
    head_backward(grad_multiplier);
  } else {
    p.stall(s, p.grad_in_filled);
    AISCALE_CUDA_CHECK(cudaMemcpyAsync(dres_, p.grad_in(), size_t(bytes), cudaMemcpyDeviceToDevice, s));
    AISCALE_CUDA_CHECK(cudaEventRecord(p.grad_in_free, s));
  }
  layers_backward(p.layer_begin(), p.layer_end(), !p.last());
  if (p.first()) {
    const int64_t Nb = bucket_capacity();
    const int32_t* b = p.buckets(m);
    if (sp_) {  // every tensor rank's rows of d res(0)
      prof_op("tensor_allgather");
      sp_gather(sp_full_, dres_);
    }
    prof_op("embedding_backward");
    cuda::embedding_backward(t_, g_wte(), g_wpe(), sp_ ? sp_full_ : dres_, b, b + Nb,
                             b + 2 * Nb + 1, p.unique_tokens()[size_t(m)], B_, T_, C_, s);
  } else {
    AISCALE_CUDA_CHECK(cudaEventRecord(p.grad_out_ready, s));
    GptCudaPipeline::comm_waits(grads, p.grad_out_ready);
    grads.send_after(dres_, bytes, p.stage() - 1);
    grads.record(p.grad_out_sent);
  }
  prof_op(nullptr);
}

// After the schedule: the queued work done, the wait measured, the loss (the mean over
// the micro-batches, computed on the last stage) the same on every stage.
float GptCuda::pipeline_finish() {
  GptCudaPipeline& p = *pp_;
  if (p.last())
    AISCALE_CUDA_CHECK(cudaMemcpyAsync(p.host_losses(), p.losses(), size_t(p.micro()) * 4,
                                       cudaMemcpyDeviceToHost, stream_));
  AISCALE_CUDA_LAUNCH_CHECK();
  p.finish();  // bounded: a stopped peer fails here
  if (tp_) tp_->finish();  // the stage's tensor-parallel all-reduces, likewise
  AISCALE_CUDA_CHECK(cudaStreamSynchronize(stream_));
  wait_s_ = p.waited_s();
  p.held = -1;
  double loss = 0;
  if (p.last()) {
    for (int m = 0; m < p.micro(); ++m) loss += double(p.host_losses()[m]);
    loss /= p.micro();
  }
  p.forward_comm().allreduce_sum(&loss, 1);
  return static_cast<float>(loss);
}

float GptCuda::pipeline_forward_backward(const int32_t* inputs, const int32_t* targets,
                                         float grad_multiplier) {
  if (!targets) throw Error("forward_backward() needs targets");
  GptCudaPipeline& p = *pp_;
  pipeline_take_batch(inputs, targets);
  p.begin_step();
  // Each micro-batch's loss is its mean; the batch's is their mean.
  const float per_micro = grad_multiplier / static_cast<float>(p.micro());
  for (const GptCudaPipelinePlan::Pass& pass : p.schedule()) {
    if (pass.forward) stage_forward(pass.microbatch, per_micro, true);
    else stage_backward(pass.microbatch, per_micro);
  }
  const float loss = pipeline_finish();
  // Off while accumulating: the data-parallel copies' sums of this stage's gradients, then
  // the embeddings' and the final norm's over the stages (the first stage's embedding
  // backward, the last stage's LM head and norm, zeros elsewhere), so that every stage
  // updates them alike.
  // Under ZeRO-1 the stages' sums come first, on the whole local buffers (the data ranks'
  // parts of a stage's buffer depend on its length), then each data rank keeps the sums of
  // its part (reduce-scatter over the copies).
  if (tp_sync_) {
    if (sp_) sp_sum_norm_grads();  // the stage's LayerNorms, over its tensor ranks
    prof_op("allreduce_gradients");
    if (data_group_ && !zero1_) data_group_->allreduce_sum(grads_, P_);
    pipeline_->allreduce_sum(grads_, shard_.layers_begin());
    pipeline_->allreduce_sum(g(shard_.lnf_w()), P_ - shard_.lnf_w());
    if (zero1_) {
      prof_op("reduce_scatter_gradients");
      zero1_->reduce_scatter(grads_, stream_);
    }
    prof_op(nullptr);
  }
  return loss;
}

// Evaluation: the micro-batches' forwards one after another through the stages.
float GptCuda::pipeline_forward(const int32_t* inputs, const int32_t* targets) {
  if (!targets)
    throw Error("the logits of a pipeline are on its last stage only: sample with "
                "parallel.pipeline_parallel = 1");
  GptCudaPipeline& p = *pp_;
  pipeline_take_batch(inputs, targets);
  p.begin_step();
  for (int m = 0; m < p.micro(); ++m) stage_forward(m, 1.0f, false);
  const float loss = pipeline_finish();
  logits_state_ = LogitsState::consumed;
  return loss;
}

}  // namespace aiscale::nn::detail
