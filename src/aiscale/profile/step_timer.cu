#include "aiscale/profile/step_timer.cuh"

#include <algorithm>
#include <cstdio>
#include <numeric>

#include "aiscale/core/stats.h"
#include "aiscale/ops/cuda/common.cuh"

namespace aiscale::profile {

StepTimer::StepTimer() {
  for (auto& e : phase_) AISCALE_CUDA_CHECK(cudaEventCreate(&e));
  AISCALE_CUDA_CHECK(cudaEventCreate(&fwd_end_));
}

StepTimer::~StepTimer() {
  for (auto& e : phase_)
    if (e) cudaEventDestroy(e);
  if (fwd_end_) cudaEventDestroy(fwd_end_);
}

void StepTimer::mark(int phase, cudaStream_t stream, bool training) {
  if (phase == kForward && !training) {
    recorded_ = 0;  // an evaluation or generation forward: not a training step
    return;
  }
  if (phase != recorded_) {  // out of order (e.g. a forward without backward): drop
    recorded_ = 0;
    if (phase != kForward) return;
  }
  AISCALE_CUDA_CHECK(cudaEventRecord(phase_[phase], stream));
  recorded_ = phase + 1;
}

void StepTimer::mark_forward_end(cudaStream_t stream) {
  if (recorded_ != 1) return;
  AISCALE_CUDA_CHECK(cudaEventRecord(fwd_end_, stream));
  fwd_end_recorded_ = true;
}

void StepTimer::collect() {
  AISCALE_CUDA_CHECK(cudaEventSynchronize(phase_[kEnd]));
  for (int i = 0; i < kEnd; ++i) {
    float ms = 0;
    AISCALE_CUDA_CHECK(cudaEventElapsedTime(&ms, phase_[i], phase_[i + 1]));
    step_ms_[i].push_back(ms);
  }
  // The forward phase split where its kernels end (the loss read back).
  if (fwd_end_recorded_) {
    float kernels = 0, waiting = 0;
    AISCALE_CUDA_CHECK(cudaEventElapsedTime(&kernels, phase_[kForward], fwd_end_));
    AISCALE_CUDA_CHECK(cudaEventElapsedTime(&waiting, fwd_end_, phase_[kBackward]));
    fwd_kernels_ms_.push_back(kernels);
    before_bwd_ms_.push_back(waiting);
  }
  fwd_end_recorded_ = false;
}

void StepTimer::start_laps(bool on) {
  lapping_ = on;
  if (on) lap_start_ = std::chrono::steady_clock::now();
}

void StepTimer::lap(int part) {
  if (!lapping_) return;
  const auto now = std::chrono::steady_clock::now();
  host_laps_[part].push_back(std::chrono::duration<double, std::milli>(now - lap_start_).count());
  lap_start_ = now;
}

void StepTimer::forget() {
  recorded_ = 0;
  for (auto& v : host_laps_) v.clear();
}

bool StepTimer::report(int64_t rank) const {
  const size_t timed_steps = step_ms_[0].size();
  if (timed_steps == 0) return false;
  // Means over the timed steps (the forward split: over the same count).
  const double k = 1.0 / double(timed_steps);
  const auto sum = [](const std::vector<double>& v) { return std::accumulate(v.begin(), v.end(), 0.0); };
  const auto mean = [&](const std::vector<double>& v) { return v.empty() ? 0.0 : sum(v) / double(v.size()); };
  const long long r = static_cast<long long>(rank);
  std::fprintf(stderr,
               "[aiscale cuda] rank %lld: mean of %lld steps (ms): forward %.3f, backward to "
               "layer 0 %.3f, embedding tail %.3f, gap before update %.3f, update %.3f; "
               "host in collective calls %.3f, host waiting for collectives %.3f\n",
               r, static_cast<long long>(timed_steps), mean(step_ms_[0]), mean(step_ms_[1]),
               mean(step_ms_[2]), mean(step_ms_[3]), mean(step_ms_[4]), host_comm_s_ * 1e3 * k,
               host_wait_s_ * 1e3 * k);
  std::fprintf(stderr,
               "[aiscale cuda] rank %lld: forward split (ms): kernels up to the loss %.3f, "
               "then the GPU waiting for backward's launch %.3f; the host per forward "
               "with targets: launches %.3f, staging and token all-gather wait %.3f, token "
               "buckets %.3f, loss wait %.3f\n",
               r, sum(fwd_kernels_ms_) * k, sum(before_bwd_ms_) * k, mean(host_laps_[0]),
               mean(host_laps_[1]), mean(host_laps_[2]), mean(host_laps_[3]));
  // Medians: one slow step (the first synchronising step waits for the slowest rank's
  // start-up) moves the means by a millisecond over 60 steps, not the medians.
  std::fprintf(stderr,
               "[aiscale cuda] rank %lld: median of %lld steps (ms): forward %.3f (kernels up "
               "to the loss %.3f, then waiting for backward's launch %.3f), backward to layer "
               "0 %.3f, embedding tail %.3f, gap before update %.3f, update %.3f; the host per "
               "forward: launches %.3f, staging and token all-gather wait %.3f, token buckets "
               "%.3f, loss wait %.3f\n",
               r, static_cast<long long>(timed_steps), median(step_ms_[0]),
               median(fwd_kernels_ms_), median(before_bwd_ms_), median(step_ms_[1]),
               median(step_ms_[2]), median(step_ms_[3]), median(step_ms_[4]),
               median(host_laps_[0]), median(host_laps_[1]), median(host_laps_[2]),
               median(host_laps_[3]));
  return true;
}

}  // namespace aiscale::profile
