#include "aiscale/nn/models/gpt_zero3.cuh"

#include <algorithm>
#include <limits>
#include <vector>

#include "aiscale/nn/models/gpt_adamw_layout.cuh"
#include "aiscale/nn/models/gpt_zero3_host.h"
#include "aiscale/ops/cuda/common.cuh"
#include "aiscale/ops/cuda/cuda_ops.cuh"

namespace aiscale::nn {

Zero3::Zero3(parallel::Communicator* comm, const nn::GptShardLayout& layout, int64_t vocab_padded,
             DType t, bool offload, bool decay_embeddings, bool gathered_layers,
             parallel::Communicator* tensor_group)
    : comm_(comm),
      layout_(layout),
      z_(layout, vocab_padded, comm ? comm->world() : 1, comm ? comm->rank() : 0),
      t_(t),
      es_(dtype_size(t)),
      L_(layout.layers()),
      offload_(offload),
      decay_embeddings_(decay_embeddings),
      gathered_(gathered_layers) {
  if (tensor_group && tensor_group->world() > 1) tensor_ = tensor_group;
  // (make_gpt refuses the offload with tensor parallelism, naming the key, before this.)
  AISCALE_CUDA_REQUIRE(!(tensor_ && offload_), "ZeRO-3: the optimizer offload with tensor parallelism");
  multi_ = comm && comm->world() > 1;
  if (multi_ && !comm->device_stream())
    throw Error(std::string("parallel.zero_stage = ") + (gathered_ ? "2" : "3") +
                " on GPUs needs a communicator with device collectives; the " + comm->backend() +
                " communicator has no device stream: use parallel.communicator = \"nccl\", "
                "\"mpi\" or \"tcp\"");
  if (multi_) {
    comm_stream_ = static_cast<cudaStream_t>(comm->device_stream());
  } else {
    AISCALE_CUDA_CHECK(cudaStreamCreateWithFlags(&own_stream_, cudaStreamNonBlocking));
    comm_stream_ = own_stream_;
  }
  auto make = [](cudaEvent_t* e) {
    AISCALE_CUDA_CHECK(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
  };
  make(&model_mark_);
  make(&resident_ready_);
  make(&comm_done_);
  make(&resident_reduced_);
  for (auto& e : slot_ready_) make(&e);
  for (auto& e : reduced_) make(&e);
  if (gathered_) {
    layer_ready_.resize(size_t(L_));
    for (auto& e : layer_ready_) make(&e);
  }
  if (offload_) {
    const size_t n = size_t(z_.shards_size());
    for (float** p : {&h_master_, &h_m_, &h_v_, &h_grads_}) {
      AISCALE_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(p), n * 4));
      std::fill(*p, *p + n, 0.0f);
    }
    AISCALE_CUDA_CHECK(cudaMallocHost(&h_work_, n * es_));
  }
  if (tensor_) {
    pieces_ = z_.pieces(layout_);
    if (!pieces_.empty())
      AISCALE_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&piece_sums_),
                                    pieces_.size() * sizeof(double)));
  }
}

Zero3::~Zero3() {
  try {
    if (multi_) comm_->wait();
  } catch (...) {
  }
  if (comm_stream_) cudaStreamSynchronize(comm_stream_);
  for (cudaEvent_t e : {model_mark_, resident_ready_, comm_done_, resident_reduced_, slot_ready_[0],
                        slot_ready_[1], reduced_[0], reduced_[1], reduced_[2]})
    if (e) cudaEventDestroy(e);
  for (cudaEvent_t e : layer_ready_)
    if (e) cudaEventDestroy(e);
  if (own_stream_) cudaStreamDestroy(own_stream_);
  if (piece_sums_) cudaFree(piece_sums_);
  for (void* p : {static_cast<void*>(h_master_), static_cast<void*>(h_m_), static_cast<void*>(h_v_),
                  static_cast<void*>(h_grads_), h_work_})
    if (p) cudaFreeHost(p);
}

void Zero3::connect(const Buffers& b, cudaStream_t model_stream) {
  b_ = b;
  stream_ = model_stream;
}

const void* Zero3::at_resident(int64_t values) const {
  return static_cast<const char*>(b_.resident) + values * int64_t(es_);
}

void Zero3::after_model() {
  AISCALE_CUDA_CHECK(cudaEventRecord(model_mark_, stream_));
  AISCALE_CUDA_CHECK(cudaStreamWaitEvent(comm_stream(), model_mark_, 0));
}

void Zero3::record(cudaEvent_t e) {
  if (multi_) comm_->record(e);
  else AISCALE_CUDA_CHECK(cudaEventRecord(e, comm_stream()));
}

void Zero3::fetch(int u, void* dst) {
  const int64_t s = z_.shard(u);
  char* d = static_cast<char*>(dst);
  AISCALE_CUDA_CHECK(cudaMemcpyAsync(d + int64_t(z_.rank()) * s * int64_t(es_),
                                     static_cast<const char*>(b_.work) + z_.shard_offset(u) * int64_t(es_),
                                     size_t(s) * es_, cudaMemcpyDeviceToDevice, comm_stream()));
  if (multi_) comm_->allgather_after(dst, s * int64_t(es_), nullptr);
}

void Zero3::begin_pass() {
  if (!resident_valid_) {
    after_model();
    fetch(0, b_.resident);
    fetch(z_.lnf_unit(), static_cast<char*>(b_.resident) + z_.resident_lnf() * int64_t(es_));
    record(resident_ready_);
    // ZeRO-2: every layer's gather queued now, in the order the forward reads them.
    for (int64_t l = 0; gathered_ && l < L_; ++l) {
      fetch(GptZero3Layout::layer_unit(l), slot(l));
      record(layer_ready_[size_t(l)]);
    }
    resident_valid_ = true;
  }
  AISCALE_CUDA_CHECK(cudaStreamWaitEvent(stream_, resident_ready_, 0));
}

const void* Zero3::layer(int64_t l, int dir) {
  if (gathered_) {  // gathered since the last update (begin_pass)
    AISCALE_CUDA_CHECK(cudaStreamWaitEvent(stream_, layer_ready_[size_t(l)], 0));
    return slot(l);
  }
  bool marked = false;
  for (int64_t j : {l, l + dir}) {
    if (j < 0 || j >= L_) continue;
    const int s = static_cast<int>(j % 2);
    if (slot_holds_[s] == j) continue;
    if (!marked) after_model();  // the slot's previous layer is done with it
    marked = true;
    fetch(GptZero3Layout::layer_unit(j), slot(s));
    record(slot_ready_[s]);
    slot_holds_[s] = j;
  }
  const int s = static_cast<int>(l % 2);
  AISCALE_CUDA_CHECK(cudaStreamWaitEvent(stream_, slot_ready_[s], 0));
  return slot(s);
}

void Zero3::begin_backward() {
  AISCALE_CUDA_CHECK(cudaStreamWaitEvent(stream_, resident_reduced_, 0));
  AISCALE_CUDA_CHECK(cudaMemsetAsync(b_.resident_grads, 0, size_t(z_.resident_size()) * 4, stream_));
  if (L_ > 0) prepare_layer_grads(L_ - 1);
}

void Zero3::prepare_layer_grads(int64_t l) {
  const int k = static_cast<int>(l % 3);
  AISCALE_CUDA_CHECK(cudaStreamWaitEvent(stream_, reduced_[k], 0));
  AISCALE_CUDA_CHECK(cudaMemsetAsync(b_.layer_grads[k], 0, size_t(z_.layer_padded()) * 4, stream_));
}

void Zero3::layer_backward_done(int64_t l) {
  const int k = static_cast<int>(l % 3);
  const int u = GptZero3Layout::layer_unit(l);
  const int64_t s = z_.shard(u);
  after_model();
  if (multi_) comm_->reduce_scatter_sum_after(b_.layer_grads[k], s, DType::f32, nullptr);
  cuda::add_inplace(b_.grads + z_.shard_offset(u), b_.layer_grads[k] + int64_t(z_.rank()) * s, s,
                    comm_stream());
  record(reduced_[k]);
}

void Zero3::resident_backward_done() {
  after_model();
  for (int u : {0, z_.lnf_unit()}) {
    float* g = b_.resident_grads + (u == 0 ? 0 : z_.resident_lnf());
    const int64_t s = z_.shard(u);
    if (multi_) comm_->reduce_scatter_sum_after(g, s, DType::f32, nullptr);
    cuda::add_inplace(b_.grads + z_.shard_offset(u), g + int64_t(z_.rank()) * s, s, comm_stream());
  }
  record(resident_reduced_);
}

void Zero3::finish() {
  record(comm_done_);
  AISCALE_CUDA_CHECK(cudaStreamWaitEvent(stream_, comm_done_, 0));
  if (multi_) comm_->wait();
}

void Zero3::zero_grad() {
  finish();
  AISCALE_CUDA_CHECK(cudaMemsetAsync(b_.grads, 0, size_t(z_.shards_size()) * 4, stream_));
}

double Zero3::grad_sum_squares() {
  finish();
  if (tensor_) return tensor_grad_sum_squares();
  cuda::sum_squares(b_.sum_squares, b_.grads, z_.shards_size(), b_.sum_squares_scratch, stream_);
  AISCALE_CUDA_CHECK(cudaMemcpyAsync(b_.host_sum_squares, b_.sum_squares, 8,
                                     cudaMemcpyDeviceToHost, stream_));
  AISCALE_CUDA_CHECK(cudaStreamSynchronize(stream_));
  double s = *b_.host_sum_squares;
  if (multi_) comm_->allreduce_sum(&s, 1);
  return s;
}

double Zero3::tensor_grad_sum_squares() {
  for (size_t i = 0; i < pieces_.size(); ++i)
    cuda::sum_squares(piece_sums_ + i, b_.grads + pieces_[i].offset, pieces_[i].n,
                      b_.sum_squares_scratch, stream_);
  std::vector<double>& sums = piece_sums_host_;
  sums.resize(pieces_.size());
  if (!sums.empty())
    AISCALE_CUDA_CHECK(cudaMemcpyAsync(sums.data(), piece_sums_, sums.size() * sizeof(double),
                                       cudaMemcpyDeviceToHost, stream_));
  AISCALE_CUDA_CHECK(cudaStreamSynchronize(stream_));
  double parts[2] = {0.0, 0.0};  // split, replicated (fixed order)
  for (size_t i = 0; i < sums.size(); ++i) parts[pieces_[i].replicated ? 1 : 0] += sums[i];
  // Every summed value lies in one data rank's shard; the data groups of the tensor ranks
  // cut their buffers alike, so the replicated part is the same on every tensor rank.
  if (multi_) comm_->allreduce_sum(parts, 2);
  tensor_->allreduce_sum(parts, 1);
  return parts[0] + parts[1];
}

void Zero3::update(const ops::AdamWParams& hp) {
  finish();
  if (offload_) {
    update_on_host(hp);
  } else {
    cuda::AdamWLayout base = gpt_adamw_layout(layout_, decay_embeddings_, 0);
    base.work_split = std::numeric_limits<int64_t>::max();
    base.work_shift = 0;
    for (int u = 0; u < z_.units(); ++u) {
      const int64_t ob = z_.owned_begin(u);
      for (const auto& r : z_.runs(ob, z_.owned_end(u))) {
        // The kernel indexes gradients and the working copy by flat position, the master
        // weights and moments by i - begin + state_offset: shift the first two so that all
        // four address this run's place in the shard buffers.
        const int64_t so = z_.shard_offset(u) + (r.work - ob), shift = so - r.flat;
        cuda::AdamWLayout L = base;
        L.begin = r.flat;
        L.n = r.flat + r.n;
        L.state_offset = so;
        cuda::adamw_update(t_, b_.master, static_cast<char*>(b_.work) + shift * int64_t(es_),
                           b_.grads + shift, b_.m, b_.v, L, hp, stream_);
      }
    }
    AISCALE_CUDA_LAUNCH_CHECK();
  }
  resident_valid_ = false;
  slot_holds_[0] = slot_holds_[1] = -1;
}

void Zero3::update_on_host(const ops::AdamWParams& hp) {
  const size_t n = size_t(z_.shards_size());
  AISCALE_CUDA_CHECK(cudaMemcpyAsync(h_grads_, b_.grads, n * 4, cudaMemcpyDeviceToHost, stream_));
  AISCALE_CUDA_CHECK(cudaStreamSynchronize(stream_));
  zero3_host_adamw(z_, layout_, decay_embeddings_, h_master_, h_m_, h_v_, h_grads_, h_work_, t_, hp);
  AISCALE_CUDA_CHECK(cudaMemcpyAsync(b_.work, h_work_, n * es_, cudaMemcpyHostToDevice, stream_));
  // The host buffer is written again by the next update only after this copy: it waits
  // for the gradients' copy behind it on the same stream, and the host waits for that.
}

void Zero3::scatter(const float* flat, float* shard) {
  finish();
  std::vector<float> host(static_cast<size_t>(z_.shards_size()));
  z_.flat_to_shards(flat, host.data());
  AISCALE_CUDA_CHECK(cudaMemcpyAsync(shard, host.data(), host.size() * 4, cudaMemcpyDefault, stream_));
  AISCALE_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void Zero3::gather(const float* shard, float* flat) {
  finish();
  // One unit at a time through a gradient buffer that holds it (none is in use between
  // steps): the largest layer fits a layer buffer, the resident units the resident one.
  std::vector<float> host(static_cast<size_t>(std::max(z_.layer_padded(), z_.resident_size())));
  for (int u = 0; u < z_.units(); ++u) {
    const bool resident = u == 0 || u == z_.lnf_unit();
    float* buf = resident ? b_.resident_grads : b_.layer_grads[0];
    const int64_t s = z_.shard(u);
    AISCALE_CUDA_CHECK(cudaMemcpyAsync(buf + int64_t(z_.rank()) * s, shard + z_.shard_offset(u),
                                       size_t(s) * 4, cudaMemcpyDefault, stream_));
    if (multi_) {
      after_model();
      comm_->allgather_after(buf, s * 4, nullptr);
      comm_->record(comm_done_);
      AISCALE_CUDA_CHECK(cudaStreamWaitEvent(stream_, comm_done_, 0));
    }
    AISCALE_CUDA_CHECK(cudaMemcpyAsync(host.data(), buf, size_t(z_.padded(u)) * 4,
                                       cudaMemcpyDeviceToHost, stream_));
    AISCALE_CUDA_CHECK(cudaStreamSynchronize(stream_));
    z_.unit_to_flat(u, host.data(), flat);
  }
  if (multi_) comm_->wait();
}

float* Zero3::state_buffer(int k) const {
  if (offload_) return k == 0 ? h_master_ : k == 1 ? h_m_ : h_v_;
  return k == 0 ? b_.master : k == 1 ? b_.m : b_.v;
}

void Zero3::master_written() {
  finish();
  if (offload_) {
    const size_t n = size_t(z_.shards_size());
    // The working copy from the host's master weights, rounded on the device (the
    // gradient shard, zero between steps, is the staging buffer).
    if (t_ == DType::f32) {
      AISCALE_CUDA_CHECK(cudaMemcpyAsync(b_.work, h_master_, n * 4, cudaMemcpyHostToDevice, stream_));
    } else {
      AISCALE_CUDA_CHECK(cudaMemcpyAsync(b_.grads, h_master_, n * 4, cudaMemcpyHostToDevice, stream_));
      cuda::cast_from_f32(t_, b_.work, b_.grads, int64_t(n), stream_);
      AISCALE_CUDA_CHECK(cudaMemsetAsync(b_.grads, 0, n * 4, stream_));
    }
  } else {
    cuda::cast_from_f32(t_, b_.work, b_.master, z_.shards_size(), stream_);
  }
  AISCALE_CUDA_CHECK(cudaStreamSynchronize(stream_));
  resident_valid_ = false;
  slot_holds_[0] = slot_holds_[1] = -1;
}

void Zero3::set_grads(const float* flat) { scatter(flat, b_.grads); }
void Zero3::get_grads(float* flat) { gather(b_.grads, flat); }

}  // namespace aiscale::nn
