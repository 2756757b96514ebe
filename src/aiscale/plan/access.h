// EuroHPC AI Factory access routes by the GPU-hours a run needs (reference/systems.md):
//   Playground   up to ~5,000 GPU-hours on one system, 1–3 months, open all year, ~2 days
//   Fast Lane    up to ~50,000 GPU-hours on one system, 1–3 months, ~4 working days
//   Large Scale  more than 50,000 GPU-hours, 3, 6 or 12 months, cut-offs and peer review
#pragma once
#include <string>

namespace aiscale::plan {

struct AccessRoute {
  std::string name;    // "Playground", "Fast Lane", "Large Scale", or "site allocation"
  std::string detail;  // limits and timing
};

inline constexpr double kPlaygroundMaxGpuHours = 5000;
inline constexpr double kFastLaneMaxGpuHours = 50000;

// eurohpc: whether the system is a EuroHPC system (AI Factory routes apply); other
// systems are reached through their own site's allocation process.
// cpu_partition: the hours are node-hours on a CPU partition, to which the AI Factory
// routes (sized in GPU-hours) do not apply.
AccessRoute access_route(double gpu_hours, bool eurohpc, bool cpu_partition = false);

}  // namespace aiscale::plan
