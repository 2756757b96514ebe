#include "aiscale/profile/gpu_span_recorder.cuh"

#include <nvtx3/nvToolsExt.h>

#include "aiscale/ops/cuda/common.cuh"

namespace aiscale::profile {

namespace {
// Events made up front (two per span): creating one inside the window costs time on the
// thread that queues the collectives.
constexpr size_t kPreallocatedEvents = 1024;
}  // namespace

GpuSpanRecorder::GpuSpanRecorder(OpProfiler& profiler, cudaStream_t stream, int track,
                                 std::string track_name)
    : profiler_(profiler), stream_(stream), track_(track) {
  profiler_.name_track(track, std::move(track_name));
  events_.resize(kPreallocatedEvents);
  for (auto& e : events_) AISCALE_CUDA_CHECK(cudaEventCreate(&e));
  pending_.reserve(kPreallocatedEvents / 2);
  // The anchor: recorded on the idle stream, it completes at (about) the host time read
  // right after waiting for it.
  AISCALE_CUDA_CHECK(cudaEventCreate(&anchor_));
  AISCALE_CUDA_CHECK(cudaStreamSynchronize(stream_));
  AISCALE_CUDA_CHECK(cudaEventRecord(anchor_, stream_));
  AISCALE_CUDA_CHECK(cudaEventSynchronize(anchor_));
  anchor_us_ = profiler_.now_us();
  profiler_.add_device_source(this);
}

GpuSpanRecorder::~GpuSpanRecorder() {
  for (const Pending& p : pending_)
    if (!p.ended) nvtxRangeEnd(p.nvtx);
  for (auto& e : events_) cudaEventDestroy(e);
  if (anchor_) cudaEventDestroy(anchor_);
}

cudaEvent_t GpuSpanRecorder::next_event(size_t& index) {
  if (used_ == events_.size()) {  // more spans than foreseen: grow (rare)
    events_.push_back(nullptr);
    AISCALE_CUDA_CHECK(cudaEventCreate(&events_.back()));
  }
  index = used_;
  return events_[used_++];
}

size_t GpuSpanRecorder::begin(Span what) {
  std::lock_guard<std::mutex> lock(mutex_);
  Pending p;
  p.span = std::move(what);
  p.span.track = track_;
  AISCALE_CUDA_CHECK(cudaEventRecord(next_event(p.start), stream_));
  p.nvtx = nvtxRangeStartA(p.span.name.c_str());
  pending_.push_back(std::move(p));
  return pending_.size() - 1;
}

void GpuSpanRecorder::end(size_t handle) {
  std::lock_guard<std::mutex> lock(mutex_);
  Pending& p = pending_.at(handle);
  AISCALE_CUDA_CHECK(cudaEventRecord(next_event(p.end), stream_));
  nvtxRangeEnd(p.nvtx);
  p.ended = true;
}

void GpuSpanRecorder::resolve(OpProfiler& into) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (pending_.empty()) return;
  // The stream's work is in order: its last event recorded completes last.
  AISCALE_CUDA_CHECK(cudaEventSynchronize(events_[used_ - 1]));
  auto at_us = [&](size_t event) {
    float ms = 0;
    AISCALE_CUDA_CHECK(cudaEventElapsedTime(&ms, anchor_, events_[event]));
    return anchor_us_ + 1e3 * double(ms);
  };
  for (Pending& p : pending_) {
    if (!p.ended) {  // never closed (a step cut short): left out
      nvtxRangeEnd(p.nvtx);
      continue;
    }
    const double start = at_us(p.start), stop = at_us(p.end);
    p.span.start_us = start;
    p.span.dur_us = stop - start;
    into.add_resolved(std::move(p.span));
  }
  pending_.clear();
  used_ = 0;
}

}  // namespace aiscale::profile
