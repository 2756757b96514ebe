// --profile on a device stream whose work comes in separate pieces with idle gaps between
// them: the data-parallel communicator's stream, where a gradient bucket's collective waits
// until backward has finished the bucket. Unlike GpuOpRecorder (the model's stream, busy
// from one op to the next, one event between two ops), each span here has its own start and
// end events, recorded on the stream just around the work, so waits are not counted.
//
// Thread-safe: the reducer records from its communication thread as well as the stepping
// thread. Whether a piece of work is profiled is decided on the stepping thread
// (recording()) and handed to the communication thread with the work. Nothing is read back
// during the window: resolve() (after the profiled steps) waits for the last event and
// turns the events into spans, aligned with the host's clock by an anchor event.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <mutex>
#include <string>
#include <vector>

#include "aiscale/profile/gpu_events.cuh"
#include "aiscale/profile/op_profiler.h"

namespace aiscale::profile {

class GpuSpanRecorder final : public GpuStreamSource {
 public:
  // Registers itself with `profiler`; waits for `stream` once (for the anchor).
  GpuSpanRecorder(OpProfiler& profiler, cudaStream_t stream, int track, std::string track_name);
  ~GpuSpanRecorder() override;

  // Whether the profiler records now; ask on the stepping thread only.
  bool recording() const { return profiler_.recording(); }
  cudaStream_t stream() const { return stream_; }

  // The work queued on the stream from now on is `what` (its name, kind, bytes and
  // collective; start and duration are filled in by resolve()), until end(handle). Also
  // an NVTX range of that name.
  size_t begin(Span what);
  void end(size_t handle);

  void resolve(OpProfiler& into) override;

 private:
  // Events made up front (two per span): creating one inside the window costs time on the
  // thread that queues the collectives.
  static constexpr size_t kPreallocatedEvents = 1024;
  struct Pending {
    Span span;
    size_t start = 0, end = 0;
    bool ended = false;
    unsigned long long nvtx = 0;
  };
  std::mutex mutex_;
  std::vector<Pending> pending_;
};

}  // namespace aiscale::profile
