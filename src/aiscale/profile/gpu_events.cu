#include "aiscale/profile/gpu_events.cuh"

#include <utility>

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

GpuStreamSource::GpuStreamSource(OpProfiler& profiler, cudaStream_t stream, int track,
                                 std::string track_name, size_t preallocated_events)
    : profiler_(profiler),
      stream_(stream),
      track_(track),
      events_(profiler, stream, preallocated_events) {
  profiler_.name_track(track, std::move(track_name));
  profiler_.add_device_source(this);
}

double AnchoredEvents::at_us(size_t index) const {
  float ms = 0;
  AISCALE_CUDA_CHECK(cudaEventElapsedTime(&ms, anchor_, events_[index]));
  return anchor_us_ + 1e3 * double(ms);
}

}  // namespace aiscale::profile
