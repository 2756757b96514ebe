#include "aiscale/profile/gpu_op_recorder.cuh"

#include <nvtx3/nvToolsExt.h>

#include "aiscale/ops/cuda/common.cuh"

namespace aiscale::profile {

GpuOpRecorder::GpuOpRecorder(OpProfiler& profiler, cudaStream_t stream, int track,
                             std::string track_name)
    : GpuStreamSource(profiler, stream, track, std::move(track_name), kPreallocatedEvents) {
  marks_.reserve(kPreallocatedEvents);
}

GpuOpRecorder::~GpuOpRecorder() {
  if (nvtx_open_) nvtxRangePop();
}

void GpuOpRecorder::mark(const char* name, double flops, double bytes) {
  if (nvtx_open_) {
    nvtxRangePop();
    nvtx_open_ = false;
  }
  if (!profiler_.recording()) return;
  size_t index = 0;
  AISCALE_CUDA_CHECK(cudaEventRecord(events_.next(index), stream_));
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
  events_.synchronize(marks_.back().event);
  // An op without a following mark (a step cut short) has no end: left out.
  for (size_t i = 0; i + 1 < marks_.size(); ++i) {
    const Mark& m = marks_[i];
    if (!m.name) continue;
    const double start = events_.at_us(m.event), end = events_.at_us(marks_[i + 1].event);
    into.add_resolved(
        {m.name, SpanKind::op, track_, start, end - start, m.flops, m.bytes, -1, {}, {}});
  }
  marks_.clear();
  events_.reset();
}

}  // namespace aiscale::profile
