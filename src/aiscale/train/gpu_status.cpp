#include "aiscale/train/gpu_status.h"

#include <chrono>

#include <fmt/format.h>

namespace aiscale::train {

std::string gpu_status_text(const std::vector<profile::NodeGpu>& gpus) {
  std::string out;
  for (const auto& g : gpus) {
    std::string one = fmt::format("GPU{}", g.index);
    if (g.utilization_pct >= 0) one += fmt::format(" {:.0f}%", g.utilization_pct);
    if (g.memory_total_bytes > 0)
      one += fmt::format(" {:.1f}/{:.1f}GiB", g.memory_used_bytes / 1073741824.0,
                         g.memory_total_bytes / 1073741824.0);
    if (g.power_w >= 0) one += fmt::format(" {:.0f}W", g.power_w);
    out += (out.empty() ? "" : ", ") + one;
  }
  return out;
}

GpuStatusSampler::GpuStatusSampler() {
  latest_ = profile::read_node_gpus();
  available_ = !latest_.empty();
  if (available_) thread_ = std::thread([this] { loop(); });
}

GpuStatusSampler::~GpuStatusSampler() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void GpuStatusSampler::loop() {
  while (!stop_) {
    for (int i = 0; i < 20 && !stop_; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (stop_) break;
    auto now = profile::read_node_gpus();
    std::lock_guard<std::mutex> lock(mu_);
    latest_ = std::move(now);
  }
}

std::vector<profile::NodeGpu> GpuStatusSampler::latest() const {
  std::lock_guard<std::mutex> lock(mu_);
  return latest_;
}

std::string GpuStatusSampler::text() const { return gpu_status_text(latest()); }

}  // namespace aiscale::train
