// Tabular data for hyperparameter search: a dense float matrix of features and one target
// per row, read from a CSV file with a header, from a pair of IDX files (images and labels,
// e.g. Fashion-MNIST) or generated (the synthetic regression).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace aiscale::tune {

enum class TaskKind { regression, classification };
const char* task_kind_name(TaskKind k);

struct Dataset {
  std::string source;  // where it came from, for messages and the results table
  TaskKind kind = TaskKind::regression;
  int64_t rows = 0;
  int64_t features = 0;
  std::vector<float> x;  // (rows, features), row-major
  std::vector<float> y;  // (rows): the value, or the class index 0..classes-1
  int64_t classes = 0;   // classification only
  std::vector<std::string> feature_names;
  std::string target;
  std::vector<std::string> class_names;  // classification: the label each index stands for
};

// A CSV file: first line the header, then one row per line, every cell a number. The
// target column is named; kind says whether it is a value or a class label (labels may be
// any numbers; they are mapped, in increasing order, to classes 0..K-1). Errors name the
// file, the line and the column: a missing target column, a row with too few or too many
// cells, an empty (missing) cell, a cell that is not a number.
Dataset read_csv(const std::string& path, const std::string& target, TaskKind kind);

// IDX images (n x rows x cols [x channels], unsigned bytes) and labels, plain or gzip'd,
// read with data/images/idx.h. Pixels become features scaled to [0, 1].
// pool > 1 averages pool x pool blocks of pixels (28x28 with pool 2: 14x14 features); the
// image's sides must be multiples of pool.
Dataset read_idx(const std::string& images_path, const std::string& labels_path, int64_t pool = 1);

// The synthetic regression (6 features, uniform in [-1, 1]):
//   y = 3 x1 - 2 x2 + x3 x4 + sin(pi x5) + 0.5 x6^2 + noise * N(0, 1)
// The same seed gives the same rows on every machine.
Dataset synthetic_regression(int64_t rows, double noise, uint64_t seed);
// Writes a dataset as CSV (header x1..xn, target), atomically.
void write_csv(const Dataset& d, const std::string& path);

// A seeded random subset of `rows` rows (all when rows is 0 or >= d.rows), in their
// original order; classes keep their numbering.
Dataset subsample(const Dataset& d, int64_t rows, uint64_t seed);

}  // namespace aiscale::tune
