// The CPU measurements of `aiscale bench machine`: OpenBLAS GEMMs (the BLAS the CPU
// backend's matmul uses) and a STREAM-like host memory test over OpenMP threads.
#pragma once
#include <cstdint>
#include <string>

#include "aiscale/bench/machine.h"

namespace aiscale::bench::cpu {

// Median seconds of one cblas_sgemm ("fp32") or cblas_dgemm ("fp64") call of this shape,
// after one warm-up call, over `repeats` calls (small shapes: loops of calls lasting at
// least a few milliseconds).
double gemm_seconds(const std::string& precision, const GemmShape& s, int repeats);

// Copy (b = a) and triad (a = b + s·c) over arrays of doubles split among the OpenMP
// threads, GB/s counting every byte read and written once (STREAM's convention).
struct HostBandwidth {
  double copy_gbs = 0, triad_gbs = 0;
};
HostBandwidth host_bandwidth(int64_t bytes_per_array, int repeats);

}  // namespace aiscale::bench::cpu
