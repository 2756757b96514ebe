#include "aiscale/tune/evaluation.h"

#include <algorithm>
#include <cmath>

#include "aiscale/core/error.h"
#include "aiscale/core/rng.h"

namespace aiscale::tune {

std::vector<int32_t> assign_folds(const Dataset& d, int64_t folds, uint64_t seed, bool stratified) {
  AISCALE_CHECK(folds >= 2 && folds <= d.rows, "folds {} for {} rows", folds, d.rows);
  std::vector<int32_t> fold_of(static_cast<size_t>(d.rows), 0);
  Rng rng(seed ^ 0xf01dULL);
  auto deal = [&](std::vector<int64_t>& rows, int64_t start) {
    for (size_t i = rows.size(); i > 1; --i) std::swap(rows[i - 1], rows[rng.below(i)]);
    for (size_t i = 0; i < rows.size(); ++i)
      fold_of[rows[i]] = static_cast<int32_t>((start + static_cast<int64_t>(i)) % folds);
    return start + static_cast<int64_t>(rows.size());
  };
  if (stratified && d.kind == TaskKind::classification) {
    std::vector<std::vector<int64_t>> by_class(static_cast<size_t>(d.classes));
    for (int64_t r = 0; r < d.rows; ++r) by_class[static_cast<size_t>(d.y[r])].push_back(r);
    // Each class continues where the previous one stopped, so the folds' sizes stay within one.
    int64_t start = 0;
    for (auto& rows : by_class) start = deal(rows, start);
  } else {
    std::vector<int64_t> rows(static_cast<size_t>(d.rows));
    for (int64_t r = 0; r < d.rows; ++r) rows[r] = r;
    deal(rows, 0);
  }
  return fold_of;
}

Split fold_split(const std::vector<int32_t>& fold_of, int32_t fold) {
  Split s;
  for (size_t r = 0; r < fold_of.size(); ++r)
    (fold_of[r] == fold ? s.eval : s.train).push_back(static_cast<int64_t>(r));
  return s;
}

double score(Metric m, std::span<const float> truth, std::span<const float> pred, int64_t classes) {
  const size_t n = truth.size();
  AISCALE_CHECK(n > 0, "no rows to score");
  switch (m) {
    case Metric::rmse:
    case Metric::mae:
    case Metric::r2: {
      AISCALE_CHECK(pred.size() == n, "{} predictions for {} rows", pred.size(), n);
      double se = 0, ae = 0, mean = 0;
      for (size_t i = 0; i < n; ++i) mean += truth[i];
      mean /= static_cast<double>(n);
      double total = 0;
      for (size_t i = 0; i < n; ++i) {
        const double e = double(pred[i]) - truth[i];
        se += e * e;
        ae += std::abs(e);
        total += (truth[i] - mean) * (truth[i] - mean);
      }
      if (m == Metric::rmse) return std::sqrt(se / static_cast<double>(n));
      if (m == Metric::mae) return ae / static_cast<double>(n);
      return total > 0 ? 1.0 - se / total : (se == 0 ? 1.0 : 0.0);
    }
    case Metric::accuracy:
    case Metric::log_loss: {
      AISCALE_CHECK(pred.size() == n * static_cast<size_t>(classes), "{} probabilities for {} rows x {} classes",
                    pred.size(), n, classes);
      double correct = 0, loss = 0;
      for (size_t i = 0; i < n; ++i) {
        const float* p = pred.data() + i * classes;
        const auto label = static_cast<int64_t>(truth[i]);
        const int64_t best = std::max_element(p, p + classes) - p;
        correct += best == label ? 1 : 0;
        loss -= std::log(std::clamp(double(p[label]), 1e-15, 1.0));
      }
      return m == Metric::accuracy ? correct / static_cast<double>(n) : loss / static_cast<double>(n);
    }
    case Metric::val_loss:
      fail("internal: a training run's validation loss is not scored from predictions");
  }
  return 0;
}

}  // namespace aiscale::tune
