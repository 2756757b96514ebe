#include "aiscale/optim/zero1.cuh"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "aiscale/ops/cuda/common.cuh"
#include "aiscale/profile/gpu_span_recorder.cuh"

namespace aiscale::optim {

Zero1::Zero1(parallel::dp::Reducer& reducer, int64_t size) : reducer_(reducer), size_(size) {
  AISCALE_CUDA_CHECK(cudaEventCreateWithFlags(&update_done_, cudaEventDisableTiming));
  AISCALE_CUDA_CHECK(cudaEventCreateWithFlags(&gathered_, cudaEventDisableTiming));
}

Zero1::~Zero1() {
  if (update_done_) cudaEventDestroy(update_done_);
  if (gathered_) cudaEventDestroy(gathered_);
}

void Zero1::update(cuda::AdamWLayout L, const ops::AdamWParams& hp, DType t, float* master,
                   void* flat_work, const float* grads, float* m, float* v, cudaStream_t s) {
  const int64_t rank = reducer_.rank();
  const size_t es = dtype_size(t);
  L.work_split = std::numeric_limits<int64_t>::max();
  L.work_shift = 0;
  for (const auto& b : reducer_.buckets()) {
    const int64_t lo = b.begin + rank * b.part, hi = std::min(lo + b.part, size_);
    if (hi <= lo) continue;
    L.begin = lo;
    L.n = hi;
    L.state_offset = b.shard_offset;
    cuda::adamw_update(t, master, flat_work, grads, m, v, L, hp, s);
  }
  AISCALE_CUDA_LAUNCH_CHECK();
  AISCALE_CUDA_CHECK(cudaEventRecord(update_done_, s));
  parallel::Communicator& comm = reducer_.transport();
  const auto& buckets = reducer_.buckets();
  // --profile: the grouped all-gather is one span on the communicator's stream, from the
  // end of the update on (bytes: the whole gathered working copy).
  profile::GpuSpanRecorder* rec = reducer_.recording_spans();
  size_t span = 0;
  if (rec) {
    AISCALE_CUDA_CHECK(cudaStreamWaitEvent(rec->stream(), update_done_, 0));
    profile::Span what;
    what.name = "allgather_params";
    what.kind = profile::SpanKind::comm;
    for (const auto& b : buckets) what.bytes += double(b.part) * double(es) * double(reducer_.world());
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
  reducer_.mark_pending();
  AISCALE_CUDA_CHECK(cudaStreamWaitEvent(s, gathered_, 0));
}

void Zero1::scatter(const float* full, float* shard, cudaStream_t s) const {
  const int64_t rank = reducer_.rank();
  AISCALE_CUDA_CHECK(cudaMemsetAsync(shard, 0, size_t(shard_size()) * 4, s));
  for (const auto& b : reducer_.buckets()) {
    const int64_t lo = b.begin + rank * b.part, n = std::min(lo + b.part, size_) - lo;
    if (n > 0)
      AISCALE_CUDA_CHECK(cudaMemcpyAsync(shard + b.shard_offset, full + lo, size_t(n) * 4,
                                         cudaMemcpyHostToDevice, s));
  }
}

void Zero1::gather(const float* shard, float* out, float* scratch, cudaStream_t s) const {
  reducer_.finish();
  const int64_t rank = reducer_.rank(), world = reducer_.world();
  const int64_t S = shard_size(), padded = reducer_.plan().padded_size;
  AISCALE_CUDA_CHECK(cudaMemcpyAsync(scratch + rank * S, shard, size_t(S) * 4,
                                     cudaMemcpyDeviceToDevice, s));
  AISCALE_CUDA_CHECK(cudaEventRecord(update_done_, s));
  parallel::Communicator& comm = reducer_.transport();
  comm.allgather_after(scratch, S * 4, update_done_);
  comm.wait();
  std::vector<float> all(static_cast<size_t>(padded));
  AISCALE_CUDA_CHECK(cudaMemcpyAsync(all.data(), scratch, size_t(padded) * 4, cudaMemcpyDeviceToHost, s));
  AISCALE_CUDA_CHECK(cudaStreamSynchronize(s));
  for (int64_t r = 0; r < world; ++r)
    for (const auto& b : reducer_.buckets()) {
      const int64_t lo = b.begin + r * b.part, n = std::min(lo + b.part, size_) - lo;
      if (n > 0) std::memcpy(out + lo, all.data() + r * S + b.shard_offset, size_t(n) * 4);
    }
}

}  // namespace aiscale::optim
