#include "aiscale/tune/model.h"

#include <algorithm>

#include "aiscale/core/error.h"

namespace aiscale::tune {

Matrix gather(const Dataset& d, std::span<const int64_t> rows) {
  Matrix m;
  m.rows = static_cast<int64_t>(rows.size());
  m.features = d.features;
  m.x.resize(static_cast<size_t>(m.rows * m.features));
  m.y.resize(static_cast<size_t>(m.rows));
  for (int64_t i = 0; i < m.rows; ++i) {
    std::copy_n(d.x.data() + rows[i] * d.features, d.features, m.x.data() + i * d.features);
    m.y[i] = d.y[rows[i]];
  }
  return m;
}

Matrix whole(const Dataset& d) { return Matrix{d.rows, d.features, d.x, d.y}; }

std::unique_ptr<Model> fit_model(Backend b, const Matrix& train, const FitOptions& o) {
  return b == Backend::mlp ? fit_mlp(train, o) : fit_xgboost(train, o);
}

int64_t param_int(const Params& p, const std::string& name) {
  auto it = p.find(name);
  AISCALE_CHECK(it != p.end(), "hyperparameter {} missing", name);
  if (auto* i = std::get_if<int64_t>(&it->second)) return *i;
  return static_cast<int64_t>(value_number(it->second));
}

double param_real(const Params& p, const std::string& name) {
  auto it = p.find(name);
  AISCALE_CHECK(it != p.end(), "hyperparameter {} missing", name);
  return value_number(it->second);
}

std::string param_text(const Params& p, const std::string& name) {
  auto it = p.find(name);
  AISCALE_CHECK(it != p.end(), "hyperparameter {} missing", name);
  return value_text(it->second);
}

}  // namespace aiscale::tune
