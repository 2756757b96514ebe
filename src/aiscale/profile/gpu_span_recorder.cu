#include "aiscale/profile/gpu_span_recorder.cuh"

#include <nvtx3/nvToolsExt.h>

#include "aiscale/ops/cuda/common.cuh"

namespace aiscale::profile {

GpuSpanRecorder::GpuSpanRecorder(OpProfiler& profiler, cudaStream_t stream, int track,
                                 std::string track_name)
    : GpuStreamSource(profiler, stream, track, std::move(track_name), kPreallocatedEvents) {
  pending_.reserve(kPreallocatedEvents / 2);
}

GpuSpanRecorder::~GpuSpanRecorder() {
  for (const Pending& p : pending_)
    if (!p.ended) nvtxRangeEnd(p.nvtx);
}

size_t GpuSpanRecorder::begin(Span what) {
  std::lock_guard<std::mutex> lock(mutex_);
  Pending p;
  p.span = std::move(what);
  p.span.track = track_;
  AISCALE_CUDA_CHECK(cudaEventRecord(events_.next(p.start), stream_));
  p.nvtx = nvtxRangeStartA(p.span.name.c_str());
  pending_.push_back(std::move(p));
  return pending_.size() - 1;
}

void GpuSpanRecorder::end(size_t handle) {
  std::lock_guard<std::mutex> lock(mutex_);
  Pending& p = pending_.at(handle);
  AISCALE_CUDA_CHECK(cudaEventRecord(events_.next(p.end), stream_));
  nvtxRangeEnd(p.nvtx);
  p.ended = true;
}

void GpuSpanRecorder::resolve(OpProfiler& into) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (pending_.empty()) return;
  // The stream's work is in order: its last event recorded completes last.
  events_.synchronize(events_.used() - 1);
  for (Pending& p : pending_) {
    if (!p.ended) {  // never closed (a step cut short): left out
      nvtxRangeEnd(p.nvtx);
      continue;
    }
    const double start = events_.at_us(p.start), stop = events_.at_us(p.end);
    p.span.start_us = start;
    p.span.dur_us = stop - start;
    into.add_resolved(std::move(p.span));
  }
  pending_.clear();
  events_.reset();
}

}  // namespace aiscale::profile
