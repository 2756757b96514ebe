#include "aiscale/profile/device_info.h"

#include <sys/resource.h>

#include <utility>

namespace aiscale::profile {

double gpu_dense_bf16_peak_tflops(const std::string& name) {
  // Vendor datasheets, dense (no sparsity) BF16 tensor-core peaks.
  static const std::pair<const char*, double> table[] = {
      {"H200", 989.0},       // H200 SXM
      {"H100 PCIe", 756.0},  // H100 PCIe
      {"H100 NVL", 835.0},
      {"H100", 989.0},       // H100 SXM5 (80GB HBM3 / 94GB / 64GB variants)
      {"GH200", 989.0},
      {"A100", 312.0},
      {"L40S", 362.0},
      {"V100", 125.0},       // fp16 tensor cores (no bf16)
  };
  for (const auto& [key, peak] : table)
    if (name.find(key) != std::string::npos) return peak;
  return 0.0;
}

size_t peak_rss_bytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<size_t>(u.ru_maxrss) * 1024;
}

}  // namespace aiscale::profile
