// The GPUs of rank 0's node for the progress line and the metrics outputs: utilisation,
// memory used/total and board power of each, read through NVML by a thread of its own
// about once a second (the stepping thread makes no NVML call).
#pragma once
#include <atomic>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "aiscale/core/non_copyable.h"
#include "aiscale/profile/gpu_power.h"

namespace aiscale::train {

class GpuStatusSampler : NonCopyable {
 public:
  GpuStatusSampler();
  ~GpuStatusSampler();

  bool available() const { return available_; }
  std::vector<profile::NodeGpu> latest() const;
  // "GPU0 97% 61.2/79.6GiB 612W, GPU1 ..." (empty when nothing is known).
  std::string text() const;

 private:
  void loop();
  bool available_ = false;
  mutable std::mutex mu_;
  std::vector<profile::NodeGpu> latest_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// The progress-line text of a set of readings.
std::string gpu_status_text(const std::vector<profile::NodeGpu>& gpus);

}  // namespace aiscale::train
