// Cross-validation folds and the metrics a trial is scored with.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "aiscale/tune/dataset.h"
#include "aiscale/tune/space.h"

namespace aiscale::tune {

// The fold (0..folds-1) of every row: a seeded shuffle dealt round-robin, per class when
// `stratified` (each fold then holds each class in about the data's proportion).
std::vector<int32_t> assign_folds(const Dataset& d, int64_t folds, uint64_t seed, bool stratified);

struct Split {
  std::vector<int64_t> train, eval;  // row indices, increasing
};
Split fold_split(const std::vector<int32_t>& fold_of, int32_t fold);

// Predictions: regression, one value per row; classification, `classes` probabilities per
// row. `truth` holds the targets of the same rows.
double score(Metric m, std::span<const float> truth, std::span<const float> predictions, int64_t classes);

}  // namespace aiscale::tune
