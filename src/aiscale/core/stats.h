// Order statistics of measured times: the median and percentiles that the trainer, the
// benchmarks and the GPU model's phase timing report.
#pragma once
#include <vector>

namespace aiscale {
// The p-quantile (0..1) with linear interpolation between neighbours; 0 for no values.
double percentile(std::vector<double> v, double p);
// percentile(v, 0.5): for an even count the mean of the two middle values.
double median(std::vector<double> v);
}  // namespace aiscale
