// The engine's MLP for tabular data: dense layers through the project's CPU ops (OpenBLAS
// sgemm for the products, the fused softmax cross-entropy, the AdamW update), ReLU between
// layers, features (and a regression target) standardized on the training rows.
#include <cmath>
#include <numeric>

#include <nlohmann/json.hpp>

#include "aiscale/core/error.h"
#include "aiscale/core/fs.h"
#include "aiscale/core/rng.h"
#include "aiscale/ops/cpu/kernels.h"
#include "aiscale/tune/model.h"

namespace aiscale::tune {
namespace {

class Mlp final : public Model {
 public:
  Mlp(const Matrix& train, const FitOptions& o);
  std::vector<float> predict(const Matrix& m) const override;
  void save(const std::string& path) const override;
  std::string file_extension() const override { return ".json"; }

  void train(const Matrix& m, const FitOptions& o);

 private:
  // Forward pass of `n` rows of standardized input; returns the last layer's output
  // (n, dims.back()). acts[l] (n, dims[l]) holds each layer's input.
  const float* forward(const float* x, int64_t n, std::vector<std::vector<float>>& acts) const;
  std::vector<float> standardize(const Matrix& m) const;

  TaskKind kind_;
  int64_t classes_;
  std::vector<int64_t> dims_;          // input, hidden..., output
  std::vector<size_t> w_off_, b_off_;  // offsets into params_
  std::vector<float> params_;
  std::vector<float> mean_, scale_;    // per feature
  float y_mean_ = 0, y_scale_ = 1;     // regression target
};

Mlp::Mlp(const Matrix& train, const FitOptions& o) : kind_(o.kind), classes_(o.classes) {
  const int64_t hidden = param_int(o.params, "hidden"), layers = param_int(o.params, "layers");
  dims_.push_back(train.features);
  for (int64_t l = 0; l < layers; ++l) dims_.push_back(hidden);
  dims_.push_back(kind_ == TaskKind::classification ? classes_ : 1);
  size_t total = 0;
  for (size_t l = 0; l + 1 < dims_.size(); ++l) {
    w_off_.push_back(total);
    total += static_cast<size_t>(dims_[l + 1] * dims_[l]);
    b_off_.push_back(total);
    total += static_cast<size_t>(dims_[l + 1]);
  }
  params_.assign(total, 0.0f);
  // He-uniform weights (ReLU), zero biases.
  Rng rng(o.seed);
  for (size_t l = 0; l + 1 < dims_.size(); ++l) {
    const float bound = std::sqrt(6.0f / static_cast<float>(dims_[l]));
    for (int64_t i = 0; i < dims_[l + 1] * dims_[l]; ++i)
      params_[w_off_[l] + i] = (2.0f * rng.uniform() - 1.0f) * bound;
  }
  // Standardization from the training rows only (no information from the evaluation fold).
  const int64_t F = train.features, N = train.rows;
  mean_.assign(F, 0.0f);
  scale_.assign(F, 1.0f);
  std::vector<double> sum(F, 0.0), sq(F, 0.0);
  for (int64_t r = 0; r < N; ++r)
    for (int64_t f = 0; f < F; ++f) {
      const double v = train.x[r * F + f];
      sum[f] += v;
      sq[f] += v * v;
    }
  for (int64_t f = 0; f < F; ++f) {
    const double m = sum[f] / N, var = std::max(0.0, sq[f] / N - m * m);
    mean_[f] = static_cast<float>(m);
    scale_[f] = var > 1e-12 ? static_cast<float>(1.0 / std::sqrt(var)) : 1.0f;
  }
  if (kind_ == TaskKind::regression) {
    double s = 0, s2 = 0;
    for (float v : train.y) s += v, s2 += double(v) * v;
    const double m = s / N, var = std::max(0.0, s2 / N - m * m);
    y_mean_ = static_cast<float>(m);
    y_scale_ = var > 1e-12 ? static_cast<float>(std::sqrt(var)) : 1.0f;
  }
}

std::vector<float> Mlp::standardize(const Matrix& m) const {
  std::vector<float> x(m.x.size());
  const int64_t F = m.features;
  for (int64_t r = 0; r < m.rows; ++r)
    for (int64_t f = 0; f < F; ++f) x[r * F + f] = (m.x[r * F + f] - mean_[f]) * scale_[f];
  return x;
}

const float* Mlp::forward(const float* x, int64_t n, std::vector<std::vector<float>>& acts) const {
  const size_t L = dims_.size() - 1;
  acts.resize(L + 1);
  acts[0].assign(x, x + n * dims_[0]);
  for (size_t l = 0; l < L; ++l) {
    acts[l + 1].resize(static_cast<size_t>(n * dims_[l + 1]));
    // (n, out) = (n, in) @ W (out, in)^T + b
    ops::cpu::matmul_forward(acts[l + 1].data(), acts[l].data(), params_.data() + w_off_[l],
                             params_.data() + b_off_[l], n, dims_[l], dims_[l + 1]);
    if (l + 1 < L)
      for (float& v : acts[l + 1]) v = v > 0.0f ? v : 0.0f;
  }
  return acts[L].data();
}

void Mlp::train(const Matrix& m, const FitOptions& o) {
  const int64_t epochs = param_int(o.params, "epochs");
  const int64_t batch = std::min<int64_t>(param_int(o.params, "batch_size"), m.rows);
  const double lr = param_real(o.params, "lr"), wd = param_real(o.params, "weight_decay");
  const double momentum = param_real(o.params, "momentum");
  const bool adam = param_text(o.params, "optimizer") == "adam";
  const std::vector<float> x = standardize(m);
  const int64_t F = m.features, N = m.rows, L = static_cast<int64_t>(dims_.size()) - 1;
  const int64_t out_dim = dims_.back();

  std::vector<float> grads(params_.size()), m1(params_.size(), 0.0f), m2(params_.size(), 0.0f);
  std::vector<std::vector<float>> acts, deltas(static_cast<size_t>(L + 1));
  std::vector<float> xb(static_cast<size_t>(batch * F)), targets_real(batch), dlosses(batch, 1.0f / batch);
  std::vector<int32_t> targets(static_cast<size_t>(batch));
  std::vector<float> losses(static_cast<size_t>(batch));
  std::vector<int64_t> order(static_cast<size_t>(N));
  std::iota(order.begin(), order.end(), int64_t{0});
  Rng rng(o.seed + 1);
  ops::AdamWParams hp;
  hp.lr = static_cast<float>(lr);
  hp.beta1 = 0.9f;
  hp.beta2 = 0.999f;
  hp.weight_decay = static_cast<float>(wd);
  for (int64_t epoch = 0; epoch < epochs; ++epoch) {
    for (int64_t i = N; i > 1; --i) std::swap(order[i - 1], order[rng.below(i)]);
    for (int64_t start = 0; start + batch <= N; start += batch) {
      const int64_t B = batch;
      for (int64_t b = 0; b < B; ++b) {
        const int64_t r = order[start + b];
        std::copy_n(x.data() + r * F, F, xb.data() + b * F);
        if (kind_ == TaskKind::classification) targets[b] = static_cast<int32_t>(m.y[r]);
        else targets_real[b] = (m.y[r] - y_mean_) / y_scale_;
      }
      const float* out = forward(xb.data(), B, acts);
      // dout of the last layer: softmax cross-entropy or half the squared error, batch mean.
      deltas[L].resize(static_cast<size_t>(B * out_dim));
      if (kind_ == TaskKind::classification) {
        ops::cpu::softmax_xent_backward(deltas[L].data(), out, targets.data(), dlosses.data(), B, out_dim);
      } else {
        for (int64_t b = 0; b < B; ++b) deltas[L][b] = (out[b] - targets_real[b]) / static_cast<float>(B);
      }
      std::fill(grads.begin(), grads.end(), 0.0f);
      for (int64_t l = L - 1; l >= 0; --l) {
        deltas[l].resize(static_cast<size_t>(B * dims_[l]));
        ops::cpu::matmul_backward(deltas[l].data(), grads.data() + w_off_[l], grads.data() + b_off_[l],
                                  deltas[l + 1].data(), acts[l].data(), params_.data() + w_off_[l], B,
                                  dims_[l], dims_[l + 1]);
        if (l > 0)  // through the ReLU that produced acts[l]
          for (size_t i = 0; i < deltas[l].size(); ++i)
            if (acts[l][i] <= 0.0f) deltas[l][i] = 0.0f;
      }
      if (adam) {
        ops::cpu::adamw_update(params_.data(), grads.data(), m1.data(), m2.data(),
                               static_cast<int64_t>(params_.size()), hp);
        ++hp.step;
      } else {
        const float mu = static_cast<float>(momentum), step = static_cast<float>(lr), decay = static_cast<float>(wd);
        for (size_t i = 0; i < params_.size(); ++i) {
          m1[i] = mu * m1[i] + grads[i] + decay * params_[i];
          params_[i] -= step * m1[i];
        }
      }
    }
    if (!std::isfinite(params_[0])) break;  // diverged: predictions will say so (NaN)
  }
}

std::vector<float> Mlp::predict(const Matrix& m) const {
  const std::vector<float> x = standardize(m);
  std::vector<std::vector<float>> acts;
  const float* out = forward(x.data(), m.rows, acts);
  std::vector<float> result;
  if (kind_ == TaskKind::regression) {
    result.resize(static_cast<size_t>(m.rows));
    for (int64_t r = 0; r < m.rows; ++r) result[r] = out[r] * y_scale_ + y_mean_;
    return result;
  }
  result.resize(static_cast<size_t>(m.rows * classes_));
  for (int64_t r = 0; r < m.rows; ++r) {
    const float* z = out + r * classes_;
    const float mx = *std::max_element(z, z + classes_);
    double total = 0;
    for (int64_t c = 0; c < classes_; ++c) total += std::exp(double(z[c]) - mx);
    for (int64_t c = 0; c < classes_; ++c)
      result[r * classes_ + c] = static_cast<float>(std::exp(double(z[c]) - mx) / total);
  }
  return result;
}

void Mlp::save(const std::string& path) const {
  nlohmann::json j;
  j["format"] = "aiscale-tune-mlp";
  j["version"] = 1;
  j["task"] = task_kind_name(kind_);
  j["classes"] = classes_;
  j["dims"] = dims_;
  j["activation"] = "relu";
  j["feature_mean"] = mean_;
  j["feature_scale"] = scale_;
  j["target_mean"] = y_mean_;
  j["target_scale"] = y_scale_;
  nlohmann::json layers = nlohmann::json::array();
  for (size_t l = 0; l + 1 < dims_.size(); ++l) {
    const float* w = params_.data() + w_off_[l];
    const float* b = params_.data() + b_off_[l];
    layers.push_back({{"weight_shape", {dims_[l + 1], dims_[l]}},
                      {"weight", std::vector<float>(w, w + dims_[l + 1] * dims_[l])},
                      {"bias", std::vector<float>(b, b + dims_[l + 1])}});
  }
  j["layers"] = std::move(layers);
  atomic_write_file(path, j.dump());
}

}  // namespace

std::unique_ptr<Model> fit_mlp(const Matrix& train, const FitOptions& o) {
  auto model = std::make_unique<Mlp>(train, o);
  model->train(train, o);
  return model;
}

}  // namespace aiscale::tune
