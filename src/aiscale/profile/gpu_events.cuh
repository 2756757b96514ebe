// The CUDA events a GPU recorder (GpuOpRecorder, GpuSpanRecorder) times its stream with:
// a pool made up front, since creating an event inside the profiled window would cost the
// step time, and an anchor event that aligns them with the host's clock.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <string>
#include <vector>

#include "aiscale/core/non_copyable.h"
#include "aiscale/profile/op_profiler.h"

namespace aiscale::profile {

class AnchoredEvents {
 public:
  // Creates `preallocated` events and records the anchor on `stream`, which must be idle:
  // it completes at (about) the host time of `profiler` read right after waiting for it.
  AnchoredEvents(OpProfiler& profiler, cudaStream_t stream, size_t preallocated);
  ~AnchoredEvents();
  AnchoredEvents(const AnchoredEvents&) = delete;
  AnchoredEvents& operator=(const AnchoredEvents&) = delete;

  // The next unused event and its index; one more is made where all are used (rare).
  cudaEvent_t next(size_t& index);
  size_t used() const { return used_; }
  // Waits for event `index`.
  void synchronize(size_t index) const;
  // The host time in microseconds at which event `index` completed.
  double at_us(size_t index) const;
  // All events unused again.
  void reset() { used_ = 0; }

 private:
  cudaEvent_t anchor_ = nullptr;
  double anchor_us_ = 0;
  std::vector<cudaEvent_t> events_;
  size_t used_ = 0;
};

// What a GPU recorder is made of: the profiler it reports to, its stream, the track its
// spans go on (named at construction) and its events. Registers itself with the profiler,
// whose resolve() calls the recorder's.
class GpuStreamSource : public DeviceSpanSource, NonCopyable {
 protected:
  GpuStreamSource(OpProfiler& profiler, cudaStream_t stream, int track, std::string track_name,
                  size_t preallocated_events);

  OpProfiler& profiler_;
  cudaStream_t stream_;
  int track_;
  AnchoredEvents events_;
};

}  // namespace aiscale::profile
