// The hyperparameters each backend understands, their limits and defaults (the
// "default hyperparameters" a search is compared against).
#include <limits>

#include <fmt/format.h>

#include "aiscale/core/error.h"
#include "aiscale/tune/space.h"

namespace aiscale::tune {

std::string value_text(const Value& v) {
  if (auto* i = std::get_if<int64_t>(&v)) return std::to_string(*i);
  if (auto* d = std::get_if<double>(&v)) return fmt::format("{}", *d);
  return std::get<std::string>(v);
}

double value_number(const Value& v) {
  if (auto* i = std::get_if<int64_t>(&v)) return static_cast<double>(*i);
  if (auto* d = std::get_if<double>(&v)) return *d;
  fail("internal: '{}' is not a number", std::get<std::string>(v));
}

const char* backend_name(Backend b) {
  return b == Backend::mlp ? "mlp" : b == Backend::xgboost ? "xgboost" : "train";
}

const std::vector<Hyperparameter>& hyperparameters(Backend b) {
  static const std::vector<Hyperparameter> mlp = {
      {"epochs", 'i', 1, 100000, {}, Value{int64_t{10}}, true, "passes over the training rows (the budget)"},
      {"hidden", 'i', 1, 65536, {}, Value{int64_t{32}}, false, "units per hidden layer"},
      {"layers", 'i', 0, 16, {}, Value{int64_t{1}}, false, "hidden layers (0: a linear model)"},
      {"lr", 'r', 1e-7, 10, {}, Value{1e-3}, false, "learning rate"},
      {"optimizer", 's', 0, 0, {"adam", "sgd"}, Value{std::string("adam")}, false, "adam or sgd (with momentum)"},
      {"batch_size", 'i', 1, 1 << 20, {}, Value{int64_t{64}}, false, "rows per gradient step"},
      {"weight_decay", 'r', 0, 1, {}, Value{0.0}, false, "decoupled weight decay (adam) or L2 (sgd)"},
      {"momentum", 'r', 0, 0.999, {}, Value{0.9}, false, "sgd momentum"},
  };
  static const std::vector<Hyperparameter> xgb = {
      {"num_round", 'i', 1, 100000, {}, Value{int64_t{10}}, true, "boosting rounds (the budget)"},
      {"max_depth", 'i', 0, 64, {}, Value{int64_t{6}}, false, "tree depth"},
      {"eta", 'r', 1e-6, 1, {}, Value{0.3}, false, "learning rate (shrinkage)"},
      {"subsample", 'r', 0.01, 1, {}, Value{1.0}, false, "rows sampled per tree"},
      {"colsample_bytree", 'r', 0.01, 1, {}, Value{1.0}, false, "features sampled per tree"},
      {"min_child_weight", 'r', 0, 1e6, {}, Value{1.0}, false, "least hessian sum in a leaf"},
      {"lambda", 'r', 0, 1e6, {}, Value{1.0}, false, "L2 regularization of leaf weights"},
      {"alpha", 'r', 0, 1e6, {}, Value{0.0}, false, "L1 regularization of leaf weights"},
      {"gamma", 'r', 0, 1e6, {}, Value{0.0}, false, "least loss reduction to split"},
      {"max_bin", 'i', 2, 1024, {}, Value{int64_t{256}}, false, "histogram bins per feature"},
  };
  // A train study's hyperparameters are the keys of its training config
  // (StudyConfig::train_keys); the budget is train.steps.
  static const std::vector<Hyperparameter> train = {
      {"train.steps", 'i', 1, 1099511627776.0, {}, Value{int64_t{100}}, true, "optimizer steps (the budget)"},
  };
  return b == Backend::mlp ? mlp : b == Backend::xgboost ? xgb : train;
}

const Hyperparameter& budget_hyperparameter(Backend b) {
  for (const auto& h : hyperparameters(b))
    if (h.budget) return h;
  fail("internal: backend {} has no budget hyperparameter", backend_name(b));
}

Params with_defaults(Backend b, const Params& p) {
  Params out = p;
  if (b == Backend::train) return out;  // the training config holds the defaults
  for (const auto& h : hyperparameters(b)) out.emplace(h.name, h.default_value);
  return out;
}

}  // namespace aiscale::tune
