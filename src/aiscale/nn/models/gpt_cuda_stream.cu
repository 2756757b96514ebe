// The CUDA GPT model's state a range of the flat model at a time: streamed checkpoints
// (train/checkpoint_stream.h), the whole-vector methods (one range of the whole model) and
// the initial weights (gpt_init_ranges), without a whole-model buffer on the host or the
// device beyond what the layout keeps anyway.
//
// A range [begin, end) of the flat model (GptLayout order) meets this rank's local buffer
// (shard_: its tensor-parallel slices, its pipeline stage's layers with the embeddings and
// the final norm, or the whole model) in runs (GptShardLayout::runs_in); each run lies in
// the state's buffer as it is, or, where the state is sharded over the data-parallel ranks,
// in the parts this rank owns (ZeRO-1: Zero1::owned_runs along the buckets; ZeRO-2/3:
// GptZero3Layout::owned_runs along the units, past the padded vocabulary rows, in device or,
// offloaded, pinned host memory). The same maps the whole-vector paths used, so the values
// are theirs bit for bit.
//
// Reading (collective like the CPU model's GptCpuState::to_full_range): every rank writes
// the values it owns into the zeroed range (the replicated tensors from tensor rank 0, the
// embeddings and the final norm from pipeline stage 0, each shard's part from its data
// rank), then the range is summed over the data group (sharded state), the pipeline and the
// tensor group: each value comes from one rank and the others add zeros, so the sums are
// exact. Writing is local: each rank keeps the part of the range it holds; the parameters'
// working copy (and ZeRO-1's shards of the master weights, which pass through the gradient
// buffer as the whole local vector) follow once the range that ends the model is in.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "aiscale/nn/models/gpt_cuda_model.cuh"
#include "aiscale/ops/cuda/common.cuh"

namespace aiscale::nn::detail {
namespace {

// Copies between a range's host values and a state buffer (device memory, or pinned host
// memory), run by run. Runs of one length at fixed strides on both sides (a column-split
// tensor's rows: one run each) become one strided copy, contiguous runs one copy.
class RunCopier {
 public:
  RunCopier(float* host, float* buffer, bool to_host, bool buffer_on_host, cudaStream_t s)
      : host_(host), buffer_(buffer), to_host_(to_host), buffer_on_host_(buffer_on_host), s_(s) {}

  // host_[h, h + n) <-> buffer_[b, b + n)
  void add(int64_t h, int64_t b, int64_t n) {
    if (n <= 0) return;
    Block& k = cur_;
    if (k.rows == 1 && h == k.h + k.n && b == k.b + k.n) {
      k.n += n;
      return;
    }
    if (k.rows == 1 && n == k.n) {
      const int64_t hs = h - k.h, bs = b - k.b;
      if (hs >= n && bs >= n && hs <= kMaxPitch && bs <= kMaxPitch) {
        k.hs = hs, k.bs = bs, k.rows = 2;
        return;
      }
    } else if (k.rows > 1 && n == k.n && h == k.h + k.rows * k.hs && b == k.b + k.rows * k.bs) {
      ++k.rows;
      return;
    }
    flush();
    k = Block{h, b, n, 0, 0, 1};
  }

  // Every copy done (the host values may be reused).
  void finish() {
    flush();
    if (!buffer_on_host_) AISCALE_CUDA_CHECK(cudaStreamSynchronize(s_));
  }

 private:
  // cudaMemcpy2D's pitches stay well below the devices' limit (2^31 bytes).
  static constexpr int64_t kMaxPitch = int64_t{1} << 28;
  struct Block {
    int64_t h = 0, b = 0, n = 0, hs = 0, bs = 0, rows = 0;
  };

  void flush() {
    const Block k = cur_;
    cur_ = Block{};
    if (k.rows == 0) return;
    float* dst = to_host_ ? host_ + k.h : buffer_ + k.b;
    const float* src = to_host_ ? buffer_ + k.b : host_ + k.h;
    const int64_t dp = to_host_ ? k.hs : k.bs, sp = to_host_ ? k.bs : k.hs;
    if (buffer_on_host_) {
      for (int64_t r = 0; r < k.rows; ++r) std::memcpy(dst + r * dp, src + r * sp, size_t(k.n) * 4);
    } else if (k.rows == 1) {
      AISCALE_CUDA_CHECK(cudaMemcpyAsync(dst, src, size_t(k.n) * 4, cudaMemcpyDefault, s_));
    } else {
      AISCALE_CUDA_CHECK(cudaMemcpy2DAsync(dst, size_t(dp) * 4, src, size_t(sp) * 4, size_t(k.n) * 4,
                                           size_t(k.rows), cudaMemcpyDefault, s_));
    }
  }

  float* host_;
  float* buffer_;
  bool to_host_, buffer_on_host_;
  cudaStream_t s_;
  Block cur_;
};

constexpr uint64_t kFnvOffset = 1469598103934665603ull, kFnvPrime = 1099511628211ull;

}  // namespace

GptCuda::StateBuffer GptCuda::state_buffer(int k, bool writing) const {
  if (zero3_)
    return {zero3_->state_buffer(k), zero3_->offload(), Sharding::zero3, zero3_->shards_size()};
  // ZeRO-1's parameters are written as the whole local vector into the gradient buffer,
  // from which end_params_write() keeps this rank's parts (as set_params always did).
  if (k == 0 && writing) return {zero1_ ? grads_ : master_, false, Sharding::none, zero1_ ? Ppad_ : P_};
  float* b = k == 0 ? master_ : k == 1 ? m_ : v_;
  return {b, false, zero1_ ? Sharding::zero1 : Sharding::none, zero1_ ? S_ : P_};
}

parallel::Communicator* GptCuda::shard_group() const {
  if (!zero1_ && !zero3_) return nullptr;
  if (tp_) return tp_->data_group();  // dp x tp: each local buffer over its data group
  if (zero1_ && pipeline_) return data_group_;
  return options_.comm && options_.comm->world() > 1 ? options_.comm : nullptr;
}

void GptCuda::held_runs(const StateBuffer& s, int64_t local, int64_t n,
                        const std::function<void(int64_t, int64_t, int64_t)>& fn) const {
  switch (s.sharding) {
    case Sharding::none: fn(local, local, n); return;
    case Sharding::zero1: zero1_->owned_runs(local, local + n, fn); return;
    case Sharding::zero3: zero3_->shards().owned_runs(local, local + n, fn); return;
  }
}

void GptCuda::copy_range(int k, int64_t begin, int64_t count, float* host, bool to_host,
                         int tensors, std::vector<std::pair<int64_t, int64_t>>* copied) const {
  const StateBuffer s = state_buffer(k, !to_host);
  // Reading: the embeddings and the final norm, alike on every pipeline stage, from stage 0.
  const bool skip_outer = to_host && pipeline_ && pipeline_->rank() != 0;
  RunCopier copier(host, s.base, to_host, s.on_host, stream_);
  for (const ShardedTensor& t : shard_.tensors()) {
    const bool replicated = t.kind == ShardKind::replicated;
    if ((tensors == kReplicatedTensors && !replicated) || (tensors == kSplitTensors && replicated))
      continue;
    if (skip_outer && t.full.layer < 0) continue;
    shard_.runs_in(t, begin, begin + count, [&](int64_t f, int64_t l, int64_t n) {
      held_runs(s, l, n, [&](int64_t l2, int64_t index, int64_t n2) {
        const int64_t at = f + (l2 - l) - begin;
        copier.add(at, index, n2);
        if (copied) copied->emplace_back(at, n2);
      });
    });
  }
  copier.finish();
}

void GptCuda::read_range(int k, int64_t begin, int64_t count, float* out) const {
  AISCALE_CUDA_REQUIRE(begin >= 0 && count >= 0 && begin + count <= layout_.size(),
                       "state range outside the model");
  if (count == 0) return;
  finish_comm();
  if (zero3_) zero3_->finish();
  std::fill(out, out + count, 0.0f);
  if (!tp_) {
    copy_range(k, begin, count, out, /*to_host=*/true, kAllTensors, nullptr);
  } else {
    // The replicated tensors: read on every tensor rank, whose copies must have stayed
    // bitwise equal (the parameters' hash is compared at the range that ends the model);
    // tensor rank 0's count.
    std::vector<std::pair<int64_t, int64_t>> replicated;
    copy_range(k, begin, count, out, true, kReplicatedTensors, &replicated);
    if (k == 0) {
      if (begin == 0) replicated_hash_ = kFnvOffset;
      for (const auto& [at, n] : replicated)
        for (int64_t i = 0; i < n; ++i) {
          uint32_t bits;
          std::memcpy(&bits, out + at + i, 4);
          replicated_hash_ = (replicated_hash_ ^ bits) * kFnvPrime;
        }
    }
    if (tp_->rank() != 0)
      for (const auto& [at, n] : replicated) std::fill(out + at, out + at + n, 0.0f);
    copy_range(k, begin, count, out, true, kSplitTensors, nullptr);
  }
  if (parallel::Communicator* g = shard_group()) g->allreduce_sum(out, count);
  if (pipeline_) pipeline_->allreduce_sum(out, count);
  if (tp_) tp_->tensor_group().allreduce_sum(out, count);
  if (tp_ && k == 0 && begin + count == layout_.size() && !tp_->same_on_every_rank(replicated_hash_) &&
      tp_->rank() == 0)
    std::fprintf(stderr, "[aiscale cuda] warning: the replicated parameters (LayerNorms, "
                         "biases, embeddings) differ between the tensor-parallel ranks; the "
                         "checkpoint holds tensor rank 0's\n");
}

void GptCuda::begin_write(int k) {
  finish_comm();
  if (zero3_) zero3_->finish();
  const StateBuffer s = state_buffer(k, true);
  // Every value is written again by the ranges; the padding (vocabulary slices' and shards'
  // tails) stays zero.
  if (s.on_host) std::memset(s.base, 0, size_t(s.size) * 4);
  else AISCALE_CUDA_CHECK(cudaMemsetAsync(s.base, 0, size_t(s.size) * 4, stream_));
  AISCALE_CUDA_CHECK(cudaStreamSynchronize(stream_));
  next_write_[k] = 0;
}

void GptCuda::write_values(int k, int64_t begin, int64_t count, const float* in) {
  AISCALE_CUDA_REQUIRE(begin >= 0 && count >= 0 && begin + count <= layout_.size(),
                       "state range outside the model");
  if (count == 0) return;
  finish_comm();
  if (zero3_) zero3_->finish();
  copy_range(k, begin, count, const_cast<float*>(in), /*to_host=*/false, kAllTensors, nullptr);
}

void GptCuda::end_params_write() {
  if (zero3_) {
    zero3_->master_written();
    return;
  }
  float* full = zero1_ ? grads_ : master_;  // the local vector (fp32)
  // Working copy: wte rows, then (after the zero padded rows) everything else.
  cuda::cast_from_f32(t_, work_, full, V_ * C_, stream_);
  AISCALE_CUDA_CHECK(cudaMemsetAsync(at(work_, V_ * C_), 0, size_t((Vp_ - V_) * C_) * es_, stream_));
  cuda::cast_from_f32(t_, at(work_, Vp_ * C_), full + V_ * C_, P_ - V_ * C_, stream_);
  if (zero1_) {  // this rank's parts of the local vector now in grads_
    zero1_->scatter(full, master_, stream_);
    AISCALE_CUDA_CHECK(cudaMemsetAsync(grads_, 0, size_t(Ppad_) * 4, stream_));
  }
  AISCALE_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void GptCuda::set_range(int k, int64_t begin, int64_t count, const float* in) {
  if (begin == 0) begin_write(k);
  AISCALE_CUDA_REQUIRE(begin == next_write_[k],
                       "state ranges must be set in ascending order from 0 (range at " +
                           std::to_string(begin) + ", expected " + std::to_string(next_write_[k]) + ")");
  write_values(k, begin, count, in);
  next_write_[k] = begin + count;
  if (k == 0 && next_write_[k] == layout_.size()) end_params_write();
}

void GptCuda::init_params() {
  // The seed's values a range at a time (not in flat order), each rank keeping its part:
  // the same weights as one GPU's model whatever the layout, and no whole-model buffer.
  begin_write(0);
  gpt_init_ranges(config_, options_.seed, [&](int64_t begin, int64_t count, const float* values) {
    write_values(0, begin, count, values);
  });
  end_params_write();
}

void GptCuda::get_params_range(int64_t begin, int64_t count, float* out) const {
  read_range(0, begin, count, out);
}

void GptCuda::set_params_range(int64_t begin, int64_t count, const float* in) {
  set_range(0, begin, count, in);
}

void GptCuda::get_optimizer_state_range(int k, int64_t begin, int64_t count, float* out) const {
  read_range(k == 0 ? 1 : 2, begin, count, out);
}

void GptCuda::set_optimizer_state_range(int k, int64_t begin, int64_t count, const float* in) {
  set_range(k == 0 ? 1 : 2, begin, count, in);
}

void GptCuda::get_params(float* out) const { read_range(0, 0, layout_.size(), out); }

void GptCuda::set_params(const float* in) { set_range(0, 0, layout_.size(), in); }

void GptCuda::get_optimizer_state(float* m, float* v) const {
  read_range(1, 0, layout_.size(), m);
  read_range(2, 0, layout_.size(), v);
}

void GptCuda::set_optimizer_state(const float* m, const float* v) {
  set_range(1, 0, layout_.size(), m);
  set_range(2, 0, layout_.size(), v);
}

}  // namespace aiscale::nn::detail
