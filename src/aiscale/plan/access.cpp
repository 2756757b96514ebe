#include "aiscale/plan/access.h"

namespace aiscale::plan {

AccessRoute access_route(double gpu_hours, bool eurohpc, bool cpu_partition) {
  if (cpu_partition)
    return {"CPU allocation",
            eurohpc ? "node-hours on a CPU partition: the AI Factory routes are sized in GPU-hours; "
                      "ask through EuroHPC's access calls or the site"
                    : "node-hours on a CPU partition: apply through the site's own allocation process"};
  if (!eurohpc)
    return {"site allocation", "not a EuroHPC system: apply through the site's own allocation process"};
  if (gpu_hours <= kPlaygroundMaxGpuHours)
    return {"Playground",
            "up to ~5,000 GPU-hours on one system for 1-3 months; open all year, first come "
            "first served; access in ~2 working days"};
  if (gpu_hours <= kFastLaneMaxGpuHours)
    return {"Fast Lane",
            "up to ~50,000 GPU-hours on one system for 1-3 months, for users familiar with HPC; "
            "access in ~4 working days"};
  return {"Large Scale",
          "more than 50,000 GPU-hours for 3, 6 or 12 months; cut-off dates and peer review, "
          "decision ~10 working days after the cut-off"};
}

}  // namespace aiscale::plan
