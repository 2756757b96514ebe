// The learners a search trains: the engine's MLP and XGBoost's gradient-boosted trees.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "aiscale/tune/dataset.h"
#include "aiscale/tune/space.h"

namespace aiscale::tune {

// Rows gathered into contiguous buffers (one fold's training or evaluation part).
struct Matrix {
  int64_t rows = 0, features = 0;
  std::vector<float> x;  // (rows, features)
  std::vector<float> y;  // (rows)
};
Matrix gather(const Dataset& d, std::span<const int64_t> rows);
Matrix whole(const Dataset& d);

struct FitOptions {
  Params params;       // every hyperparameter of the backend (with_defaults)
  TaskKind kind = TaskKind::regression;
  int64_t classes = 0;
  int threads = 1;     // this model's CPU threads (OpenMP for the MLP, nthread for XGBoost)
  uint64_t seed = 1;
};

class Model {
 public:
  virtual ~Model() = default;
  // Regression: one value per row; classification: `classes` probabilities per row.
  virtual std::vector<float> predict(const Matrix& m) const = 0;
  // Writes the trained model to `path` (atomically); the file name's extension is
  // file_extension().
  virtual void save(const std::string& path) const = 0;
  virtual std::string file_extension() const = 0;
};

std::unique_ptr<Model> fit_mlp(const Matrix& train, const FitOptions& o);
std::unique_ptr<Model> fit_xgboost(const Matrix& train, const FitOptions& o);
std::unique_ptr<Model> fit_model(Backend b, const Matrix& train, const FitOptions& o);
// Whether this build has XGBoost (libxgboost-dev found at configure time).
bool xgboost_compiled();

// The MLP's and XGBoost's typed hyperparameters out of a Params map.
int64_t param_int(const Params& p, const std::string& name);
double param_real(const Params& p, const std::string& name);
std::string param_text(const Params& p, const std::string& name);

}  // namespace aiscale::tune
