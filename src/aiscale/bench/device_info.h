// What produced a benchmark figure: device names and peak rates for MFU.
#pragma once
#include <string>

namespace aiscale::bench {
// Dense bf16 tensor-core peak in TFLOP/s for a GPU name as the driver reports it
// ("NVIDIA H100 80GB HBM3"), or 0 when unknown.
double gpu_dense_bf16_peak_tflops(const std::string& device_name);
// Peak resident memory of this process (bytes), from getrusage.
size_t peak_rss_bytes();
}  // namespace aiscale::bench
