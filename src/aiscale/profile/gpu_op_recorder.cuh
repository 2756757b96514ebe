// --profile on a GPU model: the ops of one CUDA stream, timed by CUDA events recorded
// between them (an op runs from its mark to the next) and named in NVTX ranges for Nsight
// Systems. Nothing is read back during the window: resolve() (after the profiled steps)
// waits for the last event and turns the events into spans on the stream's track,
// aligned with the host's clock by an anchor event recorded on an idle stream.
#pragma once
#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "aiscale/profile/gpu_events.cuh"
#include "aiscale/profile/op_profiler.h"

namespace aiscale::profile {

class GpuOpRecorder final : public GpuStreamSource {
 public:
  // Registers itself with `profiler` (resolve() is called by OpProfiler::resolve()).
  GpuOpRecorder(OpProfiler& profiler, cudaStream_t stream, int track, std::string track_name);
  ~GpuOpRecorder() override;

  // The op `name` (a string literal) starts on the stream now; the op before it ends
  // here. nullptr: the op before ends, none starts. Does nothing outside the window.
  void mark(const char* name, double flops = 0, double bytes = 0);
  void resolve(OpProfiler& into) override;

 private:
  // Events made up front: creating one inside the window would cost the step time.
  static constexpr size_t kPreallocatedEvents = 4096;
  struct Mark {
    size_t event;
    const char* name;
    double flops, bytes;
  };
  std::vector<Mark> marks_;
  bool nvtx_open_ = false;
};

}  // namespace aiscale::profile
