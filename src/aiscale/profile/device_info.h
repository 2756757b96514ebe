// What produced a benchmark or training figure: device names and peak rates for MFU, peak
// memory. In profile/ so that train/ and bench/ both read it (docs/design/layers.md).
#pragma once
#include <string>

namespace aiscale::profile {
// Dense bf16 tensor-core peak in TFLOP/s for a GPU name as the driver reports it
// ("NVIDIA H100 80GB HBM3"), or 0 when unknown.
double gpu_dense_bf16_peak_tflops(const std::string& device_name);
// Peak resident memory of this process (bytes), from getrusage.
size_t peak_rss_bytes();
}  // namespace aiscale::profile
