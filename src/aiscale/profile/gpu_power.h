// A GPU's board energy, power limit and SM clock over a window of benchmark steps, read
// through NVML. NVML comes with the NVIDIA driver (libnvidia-ml.so.1) and is opened at run
// time, so aiscale builds and runs without it; where it is missing, or the GPU is not
// found, the meter says why and measures nothing.
//
// Why a benchmark wants this: a GPU training at its power limit runs at whatever clock
// the limit allows, so anything that draws power beside the model's kernels (NVLink
// traffic, copy engines) slows every kernel of the step (docs/design/gradient-exchange.md).
// The mean power against the limit and the mean SM clock tell a reader whether a scaling
// efficiency was set by the power cap. The trainer reads it too (steps.jsonl,
// environment.json, the progress line), so it stands in profile/, below train/ and bench/.
#pragma once
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>
#include <thread>

#include "aiscale/core/non_copyable.h"

namespace aiscale::profile {

struct GpuPowerWindow {
  double seconds = 0;           // wall time of the window
  double energy_j = 0;          // board energy over the window (the driver's counter)
  double mean_power_w = 0;      // energy_j / seconds
  double power_limit_w = 0;     // the enforced power limit at the end of the window
  double mean_sm_clock_mhz = 0; // mean of the clock samples (every 50 ms)
  double min_sm_clock_mhz = 0;
  double max_sm_clock_mhz = 0;
  int clock_samples = 0;
  double mean_gpu_utilization_pct = 0;  // NVML's "GPU utilisation": share of time a kernel ran
  int utilization_samples = 0;
};

// The fields of a rank's "gpu_power" step-record event (steps.jsonl) for a window; all
// zero, with measured = 0, where nothing was measured.
std::vector<std::pair<std::string, double>> gpu_power_event_fields(const GpuPowerWindow& w, bool measured);

// One GPU of this node as NVML sees it now (the progress line, environment.json); -1 or
// empty where NVML does not say.
struct NodeGpu {
  int index = -1;  // NVML's index on the node
  std::string name, uuid;
  double utilization_pct = -1;
  double memory_used_bytes = 0, memory_total_bytes = 0;
  double power_w = -1;
};
// Every GPU of the node (empty, with `why`, where NVML cannot be used).
std::vector<NodeGpu> read_node_gpus(std::string* why = nullptr);
// The GPU at a PCI bus id (an empty record when unknown).
NodeGpu describe_gpu(const std::string& pci_bus_id);
// The driver's version ("550.54.15") and the CUDA version it supports (12040); ""/0 unknown.
std::string nvml_driver_version();
int nvml_cuda_driver_version();

class GpuPowerMeter : NonCopyable {
 public:
  // The GPU with this PCI bus id ("0000:19:00.0", as cudaDeviceGetPCIBusId writes it).
  explicit GpuPowerMeter(const std::string& pci_bus_id);
  ~GpuPowerMeter();

  bool available() const { return device_ != nullptr; }
  // Why nothing is measured ("" when available).
  const std::string& unavailable_reason() const { return why_; }

  // Starts a window: reads the energy counter and starts sampling the SM clock on a
  // thread of its own (the stepping thread makes no NVML call inside the window).
  void start();
  // Ends the window. Fails if start() was not called.
  GpuPowerWindow stop();

 public:
  struct Nvml;  // the library's entry points (gpu_power.cpp)

 private:
  void sample_loop();
  std::shared_ptr<Nvml> nvml_;
  void* device_ = nullptr;  // nvmlDevice_t
  std::string why_;
  double t0_ = 0;
  unsigned long long energy0_mj_ = 0;
  std::thread sampler_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  double clock_sum_ = 0, clock_min_ = 0, clock_max_ = 0;
  int clock_n_ = 0;
  double util_sum_ = 0;
  int util_n_ = 0;
};

}  // namespace aiscale::profile
