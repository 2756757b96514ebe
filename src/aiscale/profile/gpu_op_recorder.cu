#include "aiscale/profile/gpu_op_recorder.cuh"

#include <nvtx3/nvToolsExt.h>

#include "aiscale/ops/cuda/common.cuh"

namespace aiscale::profile {

namespace {
// Events made up front: creating one inside the window would cost the step time.
constexpr size_t kPreallocatedEvents = 4096;
}  // namespace

GpuOpRecorder::GpuOpRecorder(OpProfiler& profiler, cudaStream_t stream, int track,
                             std::string track_name)
    : profiler_(profiler), stream_(stream), track_(track) {
  profiler_.name_track(track, std::move(track_name));
  events_.resize(kPreallocatedEvents);
  for (auto& e : events_) AISCALE_CUDA_CHECK(cudaEventCreate(&e));
  marks_.reserve(kPreallocatedEvents);
  // The anchor: recorded on an idle stream, it completes at (about) the host time read
  // right after waiting for it.
  AISCALE_CUDA_CHECK(cudaEventCreate(&anchor_));
  AISCALE_CUDA_CHECK(cudaStreamSynchronize(stream_));
  AISCALE_CUDA_CHECK(cudaEventRecord(anchor_, stream_));
  AISCALE_CUDA_CHECK(cudaEventSynchronize(anchor_));
  anchor_us_ = profiler_.now_us();
  profiler_.add_device_source(this);
}

GpuOpRecorder::~GpuOpRecorder() {
  if (nvtx_open_) nvtxRangePop();
  for (auto& e : events_) cudaEventDestroy(e);
  if (anchor_) cudaEventDestroy(anchor_);
}

cudaEvent_t GpuOpRecorder::next_event() {
  if (used_ == events_.size()) {  // more ops than foreseen: grow (rare)
    events_.push_back(nullptr);
    AISCALE_CUDA_CHECK(cudaEventCreate(&events_.back()));
  }
  return events_[used_++];
}

void GpuOpRecorder::mark(const char* name, double flops, double bytes) {
  if (nvtx_open_) {
    nvtxRangePop();
    nvtx_open_ = false;
  }
  if (!profiler_.recording()) return;
  const size_t index = used_;
  AISCALE_CUDA_CHECK(cudaEventRecord(next_event(), stream_));
  marks_.push_back({index, name, flops, bytes});
  if (name) {
    nvtxRangePushA(name);
    nvtx_open_ = true;
  }
}

void GpuOpRecorder::resolve(OpProfiler& into) {
  if (nvtx_open_) {
    nvtxRangePop();
    nvtx_open_ = false;
  }
  if (marks_.empty()) return;
  AISCALE_CUDA_CHECK(cudaEventSynchronize(events_[marks_.back().event]));
  auto at_us = [&](size_t event) {
    float ms = 0;
    AISCALE_CUDA_CHECK(cudaEventElapsedTime(&ms, anchor_, events_[event]));
    return anchor_us_ + 1e3 * double(ms);
  };
  // An op without a following mark (a step cut short) has no end: left out.
  for (size_t i = 0; i + 1 < marks_.size(); ++i) {
    const Mark& m = marks_[i];
    if (!m.name) continue;
    const double start = at_us(m.event), end = at_us(marks_[i + 1].event);
    into.add_resolved(
        {m.name, SpanKind::op, track_, start, end - start, m.flops, m.bytes, -1, {}, {}});
  }
  marks_.clear();
  used_ = 0;
}

}  // namespace aiscale::profile
