// The synthetic regression of the scaling study, and seeded subsampling.
#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>

#include "aiscale/core/rng.h"
#include "aiscale/tune/dataset.h"

namespace aiscale::tune {

Dataset synthetic_regression(int64_t rows, double noise, uint64_t seed) {
  constexpr int64_t kFeatures = 6;
  Dataset d;
  d.source = fmt::format("synthetic regression ({} rows, noise {}, seed {})", rows, noise, seed);
  d.kind = TaskKind::regression;
  d.rows = rows;
  d.features = kFeatures;
  d.target.assign(1, 'y');
  for (int64_t f = 1; f <= kFeatures; ++f) d.feature_names.push_back(fmt::format("x{}", f));
  d.x.resize(static_cast<size_t>(rows * kFeatures));
  d.y.resize(static_cast<size_t>(rows));
  Rng rng(seed);
  const double pi = std::acos(-1.0);
  for (int64_t r = 0; r < rows; ++r) {
    float* x = d.x.data() + r * kFeatures;
    for (int64_t f = 0; f < kFeatures; ++f) x[f] = 2.0f * rng.uniform() - 1.0f;
    const double signal = 3.0 * x[0] - 2.0 * x[1] + double(x[2]) * x[3] + std::sin(pi * x[4]) +
                          0.5 * double(x[5]) * x[5];
    d.y[r] = static_cast<float>(signal + noise * rng.normal());
  }
  return d;
}

Dataset subsample(const Dataset& d, int64_t rows, uint64_t seed) {
  if (rows <= 0 || rows >= d.rows) return d;
  // A partial Fisher-Yates shuffle picks the rows; they are then kept in file order.
  std::vector<int64_t> order(static_cast<size_t>(d.rows));
  std::iota(order.begin(), order.end(), int64_t{0});
  Rng rng(seed ^ 0x5eed5eedULL);
  for (int64_t i = 0; i < rows; ++i) std::swap(order[i], order[i + static_cast<int64_t>(rng.below(d.rows - i))]);
  order.resize(static_cast<size_t>(rows));
  std::sort(order.begin(), order.end());
  Dataset s = d;
  s.rows = rows;
  s.x.resize(static_cast<size_t>(rows * d.features));
  s.y.resize(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows; ++i) {
    std::copy_n(d.x.data() + order[i] * d.features, d.features, s.x.data() + i * d.features);
    s.y[i] = d.y[order[i]];
  }
  s.source = fmt::format("{} (random {} of {} rows)", d.source, rows, d.rows);
  return s;
}

}  // namespace aiscale::tune
