// The CUDA GPT model's optimiser step and gradients (whole vectors, for tests), with the
// data-parallel reducer's set-up and the arena's sizes (the class: gpt_cuda_model.cuh; the
// model: gpt_cuda.cu; parameters and AdamW moments a range at a time: gpt_cuda_stream.cu).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "aiscale/nn/models/gpt_adamw_layout.cuh"
#include "aiscale/nn/models/gpt_cuda_model.cuh"
#include "aiscale/ops/cuda/common.cuh"

namespace aiscale::nn::detail {

void GptCuda::zero_grad() {
  if (zero3_) {
    prof_op("zero_grad");
    zero3_->zero_grad();
    prof_op(nullptr);
    return;
  }
  finish_comm();
  prof_op("zero_grad");
  AISCALE_CUDA_CHECK(cudaMemsetAsync(grads_, 0, size_t(Ppad_) * 4, stream_));
  prof_op(nullptr);
  if (reducer_) reducer_->gradients_zeroed();
}

double GptCuda::grad_sum_squares() {
  if (reducer_) return reducer_->grad_sum_squares();
  if (pipeline_) {
    // This stage's layers, and (stage 0 only) the embeddings and the final norm, which
    // every stage holds alike after the step's exchange: each value once over the stages.
    // Under tensor parallelism each range's split values are summed over the tensor group.
    // Under ZeRO-1 a data rank holds the sums of its part [olo, ohi) of the local buffer
    // only: each range cut to it, the squares added over the data group.
    finish_comm();
    prof_op("sum_squares", 2.0 * double(P_));
    int64_t olo = 0, ohi = P_;
    if (zero1_) std::tie(olo, ohi) = zero1_->owned(zero1_->buckets().front());
    auto sum = [&](int64_t a, int64_t b) {
      a = std::max(a, olo), b = std::min(b, ohi);
      if (tp_) return zero1_ ? tp_->sharded_grad_sum_squares(grads_, a, b)
                             : tp_->range_grad_sum_squares(grads_, a, b);
      if (b <= a) return 0.0;
      cuda::sum_squares(sumsq_dev_, g(a), b - a, sumsq_scratch_, stream_);
      AISCALE_CUDA_CHECK(cudaMemcpyAsync(h_sumsq_, sumsq_dev_, 8, cudaMemcpyDeviceToHost, stream_));
      AISCALE_CUDA_CHECK(cudaStreamSynchronize(stream_));
      return h_sumsq_[0];
    };
    const int64_t lo = shard_.layers_begin(), hi = shard_.lnf_w();
    double s = sum(lo, hi);
    if (pipeline_->rank() == 0) s += sum(0, lo) + sum(hi, P_);
    if (zero1_ && !tp_) data_group_->allreduce_sum(&s, 1);  // (tp: summed over it above)
    prof_op(nullptr);
    pipeline_->allreduce_sum(&s, 1);
    return s;
  }
  if (zero3_) {
    if (tp_) tp_->finish();  // the tensor group's last sums (bounded wait)
    return zero3_->grad_sum_squares();
  }
  if (tp_) {
    finish_comm();  // the last input gradients' sums (bounded wait)
    prof_op("sum_squares", 2.0 * double(P_));
    double s = 0;
    if (zero1_) {  // one bucket: this data rank's part of the local buffer holds the sums
      const auto [lo, hi] = zero1_->owned(zero1_->buckets().front());
      s = tp_->sharded_grad_sum_squares(grads_, lo, hi);
    } else {
      s = tp_->grad_sum_squares(grads_);
    }
    prof_op(nullptr);
    return s;
  }
  prof_op("sum_squares", 2.0 * double(P_));
  cuda::sum_squares(sumsq_dev_, grads_, P_, sumsq_scratch_, stream_);
  AISCALE_CUDA_CHECK(cudaMemcpyAsync(h_sumsq_, sumsq_dev_, 8, cudaMemcpyDeviceToHost, stream_));
  prof_op(nullptr);
  AISCALE_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return h_sumsq_[0];
}

void GptCuda::update(const ops::AdamWParams& hp) {
  finish_comm();
  mark(profile::StepTimer::kUpdate);
  // This rank's local buffer: its tensor-parallel slices, its pipeline stage, or the model.
  const cuda::AdamWLayout L =
      gpt_adamw_layout(shard_, options_.decay_embeddings, (Vp_ - V_) * C_);
  prof_op("adamw_update");
  if (zero3_) {
    zero3_->update(hp);  // on the shards (or the host's); gathered when used
  } else if (zero1_) {
    // AdamW on this rank's parts, all-gathered into gather_ in flat order, then copied
    // into the working copy's padded layout.
    zero1_->update(L, hp, t_, master_, gather_, grads_, m_, v_, stream_);
    copy_flat_to_work(gather_, stream_);
  } else {
    cuda::adamw_update(t_, master_, work_, grads_, m_, v_, L, hp, stream_);
    AISCALE_CUDA_LAUNCH_CHECK();
  }
  if (fp8_) {  // this step's amaxes into the histories: the next step's FP8 scales
    prof_op("fp8_scale_update");
    fp8_->update_scales(stream_);
  }
  prof_op(nullptr);
  mark(profile::StepTimer::kEnd);
}

void GptCuda::get_grads(float* out) const {
  if (tp_ && zero3_) {
    std::vector<float> local(static_cast<size_t>(P_));
    zero3_->get_grads(local.data());
    tp_->gather_host(local.data(), out);
    return;
  }
  if (tp_) {
    tp_->gather(grads_, out);
    if (pipeline_) stage_sum(out);
    return;
  }
  if (zero3_) {
    zero3_->get_grads(out);
    return;
  }
  finish_comm();
  if (pipeline_) stage_gather(grads_, out);
  else download(out, grads_);
}

void GptCuda::set_grads(const float* in) {
  if (zero3_) {
    zero3_->set_grads(tp_ ? local_part(in).data() : in);
    return;
  }
  finish_comm();
  if (tp_) tp_->scatter(in, grads_);
  else if (pipeline_) stage_scatter(in, grads_);
  else upload(grads_, in);
}

void GptCuda::subscribe_reducer(bool fused_norm) {
  if (tp_) {  // the data-parallel copies' sums are the tensor parallelism's (sum_gradients)
    S_ = Ppad_ = P_;
    rank_ = options_.comm ? options_.comm->rank() : tp_->rank();  // the job's rank
    // ZeRO-1 over the data group: the local buffer's shards, reduce-scattered after backward.
    if (options_.zero_stage == 1 && tp_->dp() > 1) {
      zero1_ = std::make_unique<optim::Zero1>(*tp_->data_group(), P_);
      zero_ = true;
      Ppad_ = zero1_->padded_size();
      S_ = zero1_->shard_size();
    }
    // ZeRO-2/3 over the data group: the local buffer as Zero3's whole model, its
    // layers gathered over the data group and their gradients reduce-scattered there.
    if (options_.zero_stage >= 2 && tp_->dp() > 1) {
      zero3_ = std::make_unique<Zero3>(
          tp_->data_group(), shard_, Vp_, t_, options_.offload_optimizer,
          options_.decay_embeddings, /*gathered_layers=*/options_.zero_stage == 2,
          &tp_->tensor_group());
      S_ = Ppad_ = zero3_->shards_size();
    }
    return;
  }
  parallel::Communicator* comm = options_.comm;
  const bool several = comm && comm->world() > 1;
  if (pipeline_) {  // the stage's buffers, summed over its copies and stages (gpt_cuda_pp.cuh)
    S_ = Ppad_ = P_;
    rank_ = several ? comm->rank() : 0;
    // ZeRO-1 over the stage's data-parallel copies: the local buffer's shards,
    // reduce-scattered after the schedule.
    if (options_.zero_stage == 1 && data_group_ && data_group_->world() > 1) {
      zero1_ = std::make_unique<optim::Zero1>(*data_group_, P_);
      zero_ = true;
      Ppad_ = zero1_->padded_size();
      S_ = zero1_->shard_size();
    }
    return;
  }
  // ZeRO-3 over several ranks, or on one GPU with the optimizer state on the host (the
  // layers then stream through the same buffers without collectives); ZeRO-2 over several
  // ranks (the same shards, the layers kept gathered).
  const bool zero2 = options_.zero_stage == 2 && several;
  if ((options_.zero_stage == 3 && (several || options_.offload_optimizer)) || zero2) {
    zero3_ = std::make_unique<Zero3>(several ? comm : nullptr, shard_, Vp_, t_,
                                     options_.offload_optimizer, options_.decay_embeddings,
                                     /*gathered_layers=*/zero2);
    dp_ = several;
    world_ = several ? comm->world() : 1;
    rank_ = several ? comm->rank() : 0;
    S_ = Ppad_ = zero3_->shards_size();
    return;
  }
  parallel::dp::ReducerOptions ro;
  ro.zero_stage = options_.zero_stage;
  ro.overlap = options_.overlap;
  ro.bucket_mib = options_.bucket_mib;
  ro.grad_comm = options_.grad_comm;
  ro.grad_transport = options_.grad_transport;
  ro.timeout_s = options_.comm_timeout_s;
  ro.verbose = verbose_;
  ro.fused_norm = fused_norm;
  ro.gathered_embeddings = true;  // gpt_cuda_backward.cu: gather_input_gradients
  reducer_ = parallel::dp::Reducer::create(options_.comm, ro, gpt_gradient_order(layout_), P_,
                                           timer_.get());
  Ppad_ = reducer_ ? reducer_->plan().padded_size : P_;
  S_ = reducer_ ? reducer_->plan().shard_size : P_;
  if (!reducer_) return;
  dp_ = true;
  world_ = reducer_->world();
  rank_ = reducer_->rank();
  overlap_ = reducer_->overlap();
  zero_ = reducer_->zero();
  if (zero_) zero1_ = std::make_unique<optim::Zero1>(*reducer_, P_);
}

GptCudaSizes GptCuda::sizes() const {
  GptCudaSizes z;
  z.B = B_, z.T = T_, z.C = C_, z.NH = NHl_, z.L = L_, z.V = V_, z.Vp = Vp_, z.N = N_;
  z.Ca = Cl_, z.F = Fl_;
  z.qkv = QKVl_;
  z.fc_out = config_.fc_rows() / shard_.tp();
  if (llama_) {
    z.rope_table = T_ * HS_;  // positions [0, T)
    z.gqa_expand = KVl_ != NHl_ && !cudnn_attention_;
  }
  z.es = es_;
  z.recompute = recompute_norms();
  z.recompute_layers = options_.recompute_layers;
  z.layer_begin = lb(), z.layer_end = le();
  z.S = S_, z.Ppad = Ppad_, z.Pw = zero3_ ? S_ : Pw_;  // ZeRO-3: the working copy's shard
  if (zero3_ && zero3_->offload()) z.S = 0;  // master weights and moments on the host
  if (zero3_) {
    z.zero3_resident = zero3_->shards().resident_size();
    z.zero3_layer = zero3_->shards().layer_padded();
    z.zero3_slots = zero3_->slots();
  }
  if (sp_) {
    z.sp_rows = N_ / shard_.tp();
    z.sp_ln_pack = 4 * L_ * C_;
  }
  if (shard_.vocab_parallel()) z.xent_stats = int64_t(shard_.tp()) * N_ * 3;
  z.cudnn_workspace_bytes = cudnn_attention_ ? cudnn_attention_->workspace_bytes() : 0;
  z.world = world_;
  z.gathered = reducer_ && overlap_;
  z.gathers_pushed = reducer_ && reducer_->pushes_gathers();
  z.zero = zero_;
  z.buckets = reducer_ ? reducer_->buckets().size() : 0;
  z.comm_buffer_bytes = reducer_ ? reducer_->comm_buffer_bytes() : 0;
  return z;
}

void GptCuda::copy_flat_to_work(const void* flat, cudaStream_t s) {
  AISCALE_CUDA_CHECK(cudaMemcpyAsync(work_, flat, size_t(V_ * C_) * es_, cudaMemcpyDeviceToDevice, s));
  AISCALE_CUDA_CHECK(cudaMemcpyAsync(at(work_, Vp_ * C_), static_cast<const char*>(flat) + V_ * C_ * int64_t(es_),
                                     size_t(P_ - V_ * C_) * es_, cudaMemcpyDeviceToDevice, s));
}

std::vector<float> GptCuda::local_part(const float* full) const {
  std::vector<float> local(static_cast<size_t>(P_));
  shard_.extract(full, local.data());
  return local;
}

void GptCuda::check_tokens(const int32_t* x, const char* what) const {
  for (int64_t i = 0; i < N_; ++i)
    if (x[i] < 0 || x[i] >= config_.vocab_size)
      throw Error(std::string(what) + " id " + std::to_string(x[i]) + " at position " +
                  std::to_string(i) + " is outside the vocabulary 0.." + std::to_string(config_.vocab_size - 1) +
                  ": the data does not match model.vocab_size");
}

// Pipeline stages (the gradients' whole vectors): each holds its layers, the embeddings and
// the final norm (alike on every stage), so the whole vector is every stage's layers and
// stage 0's others, summed over the pipeline group (each value comes from one stage; the
// others add zeros).
void GptCuda::stage_gather(const float* local_dev, float* out) const {
  std::vector<float> local(static_cast<size_t>(P_));
  download(local.data(), local_dev);
  std::fill(out, out + layout_.size(), 0.0f);
  for (const ShardedTensor& t : shard_.tensors())
    std::memcpy(out + t.full.offset, local.data() + t.offset, size_t(t.numel) * 4);
  stage_sum(out);
}

void GptCuda::stage_sum(float* full) const {
  const int64_t n = layout_.size();
  if (pipeline_->rank() != 0) {  // the embeddings and the final norm: stage 0's
    std::fill(full, full + layout_.layers_begin(), 0.0f);
    std::fill(full + layout_.lnf_w(), full + n, 0.0f);
  }
  pipeline_->allreduce_sum(full, n);
}

void GptCuda::stage_scatter(const float* in, float* local_dev) {
  std::vector<float> local(static_cast<size_t>(P_));
  shard_.extract(in, local.data());
  upload(local_dev, local.data());
}

void GptCuda::download(float* out, const float* src) const {
  AISCALE_CUDA_CHECK(cudaMemcpyAsync(out, src, size_t(P_) * 4, cudaMemcpyDeviceToHost, stream_));
  AISCALE_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void GptCuda::upload(float* dst, const float* in) {
  AISCALE_CUDA_CHECK(cudaMemcpyAsync(dst, in, size_t(P_) * 4, cudaMemcpyHostToDevice, stream_));
  AISCALE_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

}  // namespace aiscale::nn::detail
