// AISCALE_CUDA_TIMING: the phases of every training step of a GPU model, timed with CUDA
// events on the model's stream (adds a host wait per step), the forward phase split where
// its kernels end, the host's time in the parts of forward() and in the data-parallel
// reducer's calls, printed as means and medians per rank when the model ends. The
// reducer adds each gradient bucket's readiness and collective time against
// backward_start() (parallel/data_parallel/reducer.cuh).
#pragma once
#include <cuda_runtime.h>

#include <chrono>
#include <cstdint>
#include <vector>

namespace aiscale::profile {

class StepTimer {
 public:
  // Phases of a training step, in order; kEnd closes the step.
  enum Phase { kForward = 0, kBackward, kAfterLayer0, kAfterEmbedding, kUpdate, kEnd };

  StepTimer();
  ~StepTimer();
  StepTimer(const StepTimer&) = delete;
  StepTimer& operator=(const StepTimer&) = delete;

  // Phase i starts on `stream`. A forward without targets (evaluation, generation) is not
  // a training step; a phase out of order drops the step.
  void mark(int phase, cudaStream_t stream, bool training = true);
  // The forward's kernels end here (recorded once per step, after the loss).
  void mark_forward_end(cudaStream_t stream);
  // Whether the current step is being timed past the start of backward (buckets sent now
  // can be timed against backward_start()).
  bool in_backward() const { return recorded_ >= 2; }
  // A complete step was recorded: collect() it (waits for its end), then the reducer reads
  // its buckets against backward_start(), then finish_collect().
  bool step_complete() const { return recorded_ == kEnd + 1; }
  void collect();
  cudaEvent_t backward_start() const { return phase_[kBackward]; }
  void finish_collect() { recorded_ = 0; }

  // The host's time in the parts of a forward with targets (0 launches, 1 staging and the
  // token all-gather wait, 2 token buckets, 3 loss wait): start_laps() then lap(part).
  void start_laps(bool on);
  void lap(int part);
  // The model thread's time in the communicator's calls and waiting for collectives.
  void add_host_comm(double seconds) { host_comm_s_ += seconds; }
  void add_host_wait(double seconds) { host_wait_s_ += seconds; }
  // Forget the step in progress and the host laps so far (the warm-up step is not a
  // training step).
  void forget();

  // Prints means and medians (stderr); false when no step was timed.
  bool report(int64_t rank) const;

 private:
  cudaEvent_t phase_[kEnd + 1] = {};
  cudaEvent_t fwd_end_ = nullptr;
  bool fwd_end_recorded_ = false;
  int recorded_ = 0;
  // Per timed step (ms): the five phases; the forward's kernels and the wait after them.
  std::vector<double> step_ms_[kEnd];
  std::vector<double> fwd_kernels_ms_, before_bwd_ms_;
  std::vector<double> host_laps_[4];
  bool lapping_ = false;
  std::chrono::steady_clock::time_point lap_start_;
  double host_comm_s_ = 0, host_wait_s_ = 0;
};

}  // namespace aiscale::profile
