#include "aiscale/profile/gpu_events.cuh"

#include "aiscale/ops/cuda/common.cuh"

namespace aiscale::profile {

AnchoredEvents::AnchoredEvents(OpProfiler& profiler, cudaStream_t stream, size_t preallocated) {
  events_.resize(preallocated);
  for (auto& e : events_) AISCALE_CUDA_CHECK(cudaEventCreate(&e));
  AISCALE_CUDA_CHECK(cudaEventCreate(&anchor_));
  AISCALE_CUDA_CHECK(cudaStreamSynchronize(stream));
  AISCALE_CUDA_CHECK(cudaEventRecord(anchor_, stream));
  AISCALE_CUDA_CHECK(cudaEventSynchronize(anchor_));
  anchor_us_ = profiler.now_us();
}

AnchoredEvents::~AnchoredEvents() {
  for (auto& e : events_) cudaEventDestroy(e);
  if (anchor_) cudaEventDestroy(anchor_);
}

cudaEvent_t AnchoredEvents::next(size_t& index) {
  if (used_ == events_.size()) {
    events_.push_back(nullptr);
    AISCALE_CUDA_CHECK(cudaEventCreate(&events_.back()));
  }
  index = used_;
  return events_[used_++];
}

void AnchoredEvents::synchronize(size_t index) const {
  AISCALE_CUDA_CHECK(cudaEventSynchronize(events_[index]));
}

double AnchoredEvents::at_us(size_t index) const {
  float ms = 0;
  AISCALE_CUDA_CHECK(cudaEventElapsedTime(&ms, anchor_, events_[index]));
  return anchor_us_ + 1e3 * double(ms);
}

}  // namespace aiscale::profile
