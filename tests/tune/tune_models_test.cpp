// The two learners of aiscale tune fit what they are given: the engine's MLP (Adam and
// SGD, regression and classification) and XGBoost (nthread set per model).
#include <gtest/gtest.h>

#include <numeric>

#include "aiscale/tune/evaluation.h"
#include "aiscale/tune/model.h"

using namespace aiscale;

namespace {

double holdout_score(tune::Backend b, const tune::Dataset& d, tune::Params p, tune::Metric m, int threads = 1) {
  const auto fold_of = tune::assign_folds(d, 4, 1, d.kind == tune::TaskKind::classification);
  const auto s = tune::fold_split(fold_of, 0);
  const tune::Matrix train = tune::gather(d, s.train), eval = tune::gather(d, s.eval);
  tune::FitOptions o;
  o.params = tune::with_defaults(b, p);
  o.kind = d.kind;
  o.classes = d.classes;
  o.threads = threads;
  const auto model = tune::fit_model(b, train, o);
  return tune::score(m, eval.y, model->predict(eval), d.classes);
}

// Two classes from the synthetic features: the sign of the regression's signal.
tune::Dataset two_classes() {
  tune::Dataset d = tune::synthetic_regression(800, 0.0, 3);
  d.kind = tune::TaskKind::classification;
  d.classes = 2;
  for (float& y : d.y) y = y > 0 ? 1.0f : 0.0f;
  return d;
}

TEST(TuneMlp, AdamAndSgdFitTheSyntheticRegression) {
  const tune::Dataset d = tune::synthetic_regression(2000, 0.1, 2);
  const tune::Params adam = {{"epochs", int64_t{30}}, {"hidden", int64_t{32}}, {"lr", 1e-2}};
  EXPECT_GT(holdout_score(tune::Backend::mlp, d, adam, tune::Metric::r2), 0.95);
  tune::Params sgd = adam;
  sgd["optimizer"] = std::string("sgd");
  sgd["lr"] = 2e-2;
  EXPECT_GT(holdout_score(tune::Backend::mlp, d, sgd, tune::Metric::r2), 0.9);
  // A linear model (no hidden layer) cannot fit the product and sine terms as well.
  tune::Params linear = adam;
  linear["layers"] = int64_t{0};
  EXPECT_LT(holdout_score(tune::Backend::mlp, d, linear, tune::Metric::r2),
            holdout_score(tune::Backend::mlp, d, adam, tune::Metric::r2));
}

TEST(TuneMlp, ClassifiesAndIsDeterministic) {
  const tune::Dataset d = two_classes();
  const tune::Params p = {{"epochs", int64_t{20}}, {"lr", 1e-2}};
  const double acc = holdout_score(tune::Backend::mlp, d, p, tune::Metric::accuracy);
  EXPECT_GT(acc, 0.9);
  EXPECT_EQ(acc, holdout_score(tune::Backend::mlp, d, p, tune::Metric::accuracy));
}

TEST(TuneXgboost, FitsRegressionAndClasses) {
  if (!tune::xgboost_compiled()) GTEST_SKIP() << "built without XGBoost (libxgboost-dev)";
  const tune::Dataset d = tune::synthetic_regression(2000, 0.1, 2);
  const tune::Params p = {{"num_round", int64_t{60}}, {"max_depth", int64_t{4}}};
  EXPECT_GT(holdout_score(tune::Backend::xgboost, d, p, tune::Metric::r2), 0.9);
  EXPECT_GT(holdout_score(tune::Backend::xgboost, two_classes(), p, tune::Metric::accuracy), 0.85);
  // Two threads give the same trees (hist is deterministic).
  EXPECT_EQ(holdout_score(tune::Backend::xgboost, d, p, tune::Metric::rmse, 1),
            holdout_score(tune::Backend::xgboost, d, p, tune::Metric::rmse, 2));
}

}  // namespace
