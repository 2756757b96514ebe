#include "aiscale/optim/zero1.cuh"

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <string>
#include <vector>

#include "aiscale/ops/cuda/common.cuh"
#include "aiscale/profile/gpu_span_recorder.cuh"

namespace aiscale::optim {

namespace {
void create_events(std::initializer_list<cudaEvent_t*> events) {
  for (cudaEvent_t* e : events)
    AISCALE_CUDA_CHECK(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
}
}  // namespace

Zero1::Zero1(parallel::dp::Reducer& reducer, int64_t size)
    : reducer_(&reducer), rank_(reducer.rank()), world_(reducer.world()), size_(size) {
  create_events({&update_done_, &gathered_});
}

Zero1::Zero1(parallel::Communicator& data, int64_t size)
    : data_(&data), rank_(data.rank()), world_(data.world()), size_(size) {
  AISCALE_CUDA_REQUIRE(data.device_stream() != nullptr && data.world() > 1,
                       "ZeRO-1 without a reducer needs a device communicator of several ranks");
  // One segment, summed once after backward: one bucket of the whole padded buffer.
  const parallel::dp::GradientOrder order = {parallel::dp::GradientSegment{0, size, parallel::dp::kAfterBackward}};
  parallel::dp::BucketPlanOptions po;
  po.bucket_values = size;
  po.world = world_;
  po.shard = true;
  po.overlap = false;
  plan_ = parallel::dp::plan_buckets(order, size, po);
  create_events({&update_done_, &gathered_, &grads_ready_, &reduced_});
}

Zero1::~Zero1() {
  for (cudaEvent_t e : {update_done_, gathered_, grads_ready_, reduced_})
    if (e) cudaEventDestroy(e);
}

std::pair<int64_t, int64_t> Zero1::owned(const parallel::dp::Bucket& b) const {
  const int64_t lo = b.begin + rank_ * b.part;
  return {lo, std::max(lo, std::min(lo + b.part, size_))};
}

void Zero1::owned_runs(int64_t begin, int64_t end,
                       const std::function<void(int64_t, int64_t, int64_t)>& fn) const {
  if (parts_.empty()) {  // the buckets come in gradient order: sorted once
    for (const auto& b : buckets()) {
      const auto [lo, hi] = owned(b);
      if (hi > lo) parts_.push_back({lo, hi, b.shard_offset});
    }
    std::sort(parts_.begin(), parts_.end());
  }
  // The first part that ends after begin, then each part the range meets.
  auto it = std::upper_bound(parts_.begin(), parts_.end(), begin,
                             [](int64_t x, const std::array<int64_t, 3>& p) { return x < p[1]; });
  for (; it != parts_.end() && (*it)[0] < end; ++it) {
    const int64_t lo = std::max(begin, (*it)[0]), hi = std::min(end, (*it)[1]);
    if (lo < hi) fn(lo, (*it)[2] + (lo - (*it)[0]), hi - lo);
  }
}

void Zero1::finish() const {
  if (reducer_) reducer_->finish();
  else data_->wait();
}

void Zero1::reduce_scatter(float* grads, cudaStream_t s) {
  AISCALE_CUDA_REQUIRE(reducer_ == nullptr, "ZeRO-1: the reducer reduce-scatters the gradients");
  AISCALE_CUDA_CHECK(cudaEventRecord(grads_ready_, s));
  const auto& buckets = plan_.buckets;
  data_->group_begin();
  for (size_t k = 0; k < buckets.size(); ++k)
    data_->reduce_scatter_sum_after(grads + buckets[k].begin, buckets[k].part, DType::f32,
                                    k == 0 ? grads_ready_ : nullptr);
  data_->group_end();
  data_->record(reduced_);
  AISCALE_CUDA_CHECK(cudaStreamWaitEvent(s, reduced_, 0));
}

void Zero1::update(cuda::AdamWLayout L, const ops::AdamWParams& hp, DType t, float* master,
                   void* flat_work, const float* grads, float* m, float* v, cudaStream_t s) {
  L.work_split = std::numeric_limits<int64_t>::max();
  L.work_shift = 0;
  update_parts(
      [&](int64_t lo, int64_t hi, int64_t state_offset) {
        L.begin = lo;
        L.n = hi;
        L.state_offset = state_offset;
        cuda::adamw_update(t, master, flat_work, grads, m, v, L, hp, s);
      },
      t, flat_work, s);
}

void Zero1::update_parts(const std::function<void(int64_t, int64_t, int64_t)>& step, DType t,
                         void* flat_work, cudaStream_t s) {
  const size_t es = dtype_size(t);
  for (const auto& b : buckets()) {
    const auto [lo, hi] = owned(b);
    if (hi > lo) step(lo, hi, b.shard_offset);
  }
  AISCALE_CUDA_LAUNCH_CHECK();
  AISCALE_CUDA_CHECK(cudaEventRecord(update_done_, s));
  parallel::Communicator& comm = transport();
  const auto& buckets = this->buckets();
  // --profile (plain data parallelism): the grouped all-gather is one span on the
  // communicator's stream, from the end of the update on (bytes: the whole gathered
  // working copy).
  profile::GpuSpanRecorder* rec = reducer_ ? reducer_->recording_spans() : nullptr;
  size_t span = 0;
  if (rec) {
    AISCALE_CUDA_CHECK(cudaStreamWaitEvent(rec->stream(), update_done_, 0));
    profile::Span what;
    what.name = "allgather_params";
    what.kind = profile::SpanKind::comm;
    for (const auto& b : buckets) what.bytes += double(b.part) * double(es) * double(world_);
    what.dtype = std::string(dtype_name(t));
    what.collective = "allgather (" + std::to_string(buckets.size()) + " buckets, grouped)";
    span = rec->begin(std::move(what));
  }
  comm.group_begin();  // one launch for all buckets' all-gathers (the queue is drained)
  for (size_t k = 0; k < buckets.size(); ++k) {
    const auto& b = buckets[k];
    comm.allgather_after(static_cast<char*>(flat_work) + b.begin * int64_t(es), b.part * int64_t(es),
                         k == 0 ? update_done_ : nullptr);
  }
  comm.group_end();
  if (rec) rec->end(span);
  comm.record(gathered_);
  if (reducer_) reducer_->mark_pending();
  AISCALE_CUDA_CHECK(cudaStreamWaitEvent(s, gathered_, 0));
}

void Zero1::scatter(const float* full, float* shard, cudaStream_t s) const {
  AISCALE_CUDA_CHECK(cudaMemsetAsync(shard, 0, size_t(shard_size()) * 4, s));
  for (const auto& b : buckets()) {
    const auto [lo, hi] = owned(b);
    if (hi > lo)
      AISCALE_CUDA_CHECK(cudaMemcpyAsync(shard + b.shard_offset, full + lo, size_t(hi - lo) * 4,
                                         cudaMemcpyDefault, s));
  }
}

void Zero1::gather(const float* shard, float* out, float* scratch, cudaStream_t s) const {
  finish();
  const int64_t S = shard_size(), padded = padded_size();
  AISCALE_CUDA_CHECK(cudaMemcpyAsync(scratch + rank_ * S, shard, size_t(S) * 4,
                                     cudaMemcpyDeviceToDevice, s));
  AISCALE_CUDA_CHECK(cudaEventRecord(update_done_, s));
  parallel::Communicator& comm = transport();
  comm.allgather_after(scratch, S * 4, update_done_);
  comm.wait();
  std::vector<float> all(static_cast<size_t>(padded));
  AISCALE_CUDA_CHECK(cudaMemcpyAsync(all.data(), scratch, size_t(padded) * 4, cudaMemcpyDeviceToHost, s));
  AISCALE_CUDA_CHECK(cudaStreamSynchronize(s));
  for (int64_t r = 0; r < world_; ++r)
    for (const auto& b : buckets()) {
      const int64_t lo = b.begin + r * b.part, n = std::min(lo + b.part, size_) - lo;
      if (n > 0) std::memcpy(out + lo, all.data() + r * S + b.shard_offset, size_t(n) * 4);
    }
}

}  // namespace aiscale::optim
