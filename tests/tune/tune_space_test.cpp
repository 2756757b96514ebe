// aiscale tune's study files: every key and range checked with the key named; grid and
// random trials; folds, metrics and the thread plan.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <set>

#include "../support/error_of.h"
#include "../support/run_support.h"
#include "aiscale/tune/evaluation.h"
#include "aiscale/tune/schedule.h"
#include "aiscale/tune/space.h"

using namespace aiscale;
using namespace aiscale::testsupport;

namespace {

const char* kBase =
    "[study]\nbackend = \"mlp\"\ntrials = 5\nfolds = 3\nseed = 4\n"
    "[data]\nsource = \"synthetic\"\nsynthetic_rows = 100\n"
    "[params.lr]\ntype = \"log-uniform\"\nlow = 1e-4\nhigh = 1e-1\n"
    "[params.hidden]\ntype = \"choice\"\nvalues = [8, 16]\n";

tune::StudyConfig load(const std::string& text, const std::vector<std::string>& overrides = {}) {
  const fs::path dir = temp_dir("tune-space");
  std::ofstream(dir / "s.toml") << text;
  auto c = tune::load_study_config((dir / "s.toml").string(), overrides);
  fs::remove_all(dir);
  return c;
}

std::string load_error(const std::string& text, const std::vector<std::string>& overrides = {}) {
  return error_of([&] { load(text, overrides); });
}

TEST(TuneSpace, ReadsTheStudyAndOverrides) {
  const auto c = load(kBase, {"study.trials=9", "params.lr.high=0.5"});
  EXPECT_EQ(c.trials, 9);
  EXPECT_EQ(c.folds, 3);
  ASSERT_EQ(c.params.size(), 2u);
  EXPECT_DOUBLE_EQ(c.params[1].high, 0.5);  // [params] in key order: hidden, lr
  EXPECT_EQ(c.dir, "tune/tune");
}

TEST(TuneSpace, UnknownKeysAreNamedWithTheNearestKnownOne) {
  std::string e = load_error(std::string(kBase) + "[halving]\neta = 3\nmin_budget = 1\nmax_budget = 9\nmax_bugdet = 3\n");
  EXPECT_NE(e.find("unknown key 'halving.max_bugdet' — did you mean 'max_budget'?"), std::string::npos) << e;
  e = load_error(kBase, {"study.trails=3"});
  EXPECT_NE(e.find("unknown key 'study.trails' — did you mean 'trials'?"), std::string::npos) << e;
  e = load_error(std::string(kBase) + "[params.learning_rate]\ntype = \"uniform\"\nlow = 0.1\nhigh = 0.2\n");
  EXPECT_NE(e.find("unknown mlp hyperparameter (in [params]) 'learning_rate'"), std::string::npos) << e;
  e = load_error(std::string(kBase) + "[fixed]\ndepth = 3\n");
  EXPECT_NE(e.find("unknown mlp hyperparameter (in [fixed]) 'depth'"), std::string::npos) << e;
  e = load_error(std::string(kBase) + "[search]\nx = 1\n");
  EXPECT_NE(e.find("unknown section 'search'"), std::string::npos) << e;
  e = load_error(std::string(kBase) + "[params.hidden2]\nkind = \"int\"\n");
  EXPECT_NE(e.find("hidden2"), std::string::npos) << e;
}

TEST(TuneSpace, EmptyRangesAndBadBoundsNameTheKey) {
  std::string e = load_error(kBase, {"params.lr.low=0.5", "params.lr.high=0.5"});
  EXPECT_NE(e.find("params.lr: the range [0.5, 0.5] is empty"), std::string::npos) << e;
  e = load_error(std::string(kBase) + "[params.layers]\ntype = \"int\"\nlow = 3\nhigh = 2\n");
  EXPECT_NE(e.find("params.layers: the range [3, 2] is empty"), std::string::npos) << e;
  e = load_error(kBase, {"params.hidden.values=[]"});
  EXPECT_NE(e.find("params.hidden.values is empty"), std::string::npos) << e;
  e = load_error(kBase, {"params.lr.low=-1"});
  EXPECT_NE(e.find("params.lr.low = -1 is too small"), std::string::npos) << e;
  e = load_error(kBase, {"params.hidden.values=[8, 0]"});
  EXPECT_NE(e.find("params.hidden.values[1] = 0 is too small"), std::string::npos) << e;
  e = load_error(std::string(kBase) + "[halving]\nmin_budget = 9\nmax_budget = 3\n");
  EXPECT_NE(e.find("the budget range is empty"), std::string::npos) << e;
  e = load_error(std::string(kBase) + "[halving]\nmin_budget = 1\n");
  EXPECT_NE(e.find("[halving] needs max_budget (epochs"), std::string::npos) << e;
  e = load_error(kBase, {"study.folds=1"});
  EXPECT_NE(e.find("study.folds = 1 is too small"), std::string::npos) << e;
  e = load_error(kBase, {"study.search=grid"});
  EXPECT_NE(e.find("grid search cuts params.lr into points"), std::string::npos) << e;
  e = load_error(kBase, {"params.optimizer.type=uniform", "params.optimizer.low=1", "params.optimizer.high=2"});
  EXPECT_NE(e.find("text hyperparameter"), std::string::npos) << e;
  e = load_error("[data]\nsource = \"csv\"\npath = \"x.csv\"\n");
  EXPECT_NE(e.find("needs data.target"), std::string::npos) << e;
}

TEST(TuneSpace, FoldsAgainstRowsAndMetricAgainstTask) {
  auto c = load(kBase, {"study.folds=200"});
  const tune::Dataset d = tune::synthetic_regression(100, 0.1, 1);
  std::string e = error_of([&] { tune::check_against_data(c, d); });
  EXPECT_NE(e.find("study.folds = 200 is more than the 100 rows"), std::string::npos) << e;
  c = load(kBase, {"study.metric=accuracy"});
  e = error_of([&] { tune::check_against_data(c, d); });
  EXPECT_NE(e.find("does not fit a regression task"), std::string::npos) << e;
  c = load(kBase, {"study.task=classification"});
  e = error_of([&] { tune::check_against_data(c, d); });
  EXPECT_NE(e.find("study.task = \"classification\", but synthetic regression"), std::string::npos) << e;
  c = load(kBase);
  tune::check_against_data(c, d);
  EXPECT_EQ(c.metric, tune::Metric::rmse);
}

TEST(TuneSpace, RandomTrialsAreSeededAndInRange) {
  const auto c = load(kBase);
  const auto a = tune::make_trials(c), b = tune::make_trials(c);
  ASSERT_EQ(a.size(), 5u);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, tune::make_trials(load(kBase, {"study.seed=5"})));
  for (const auto& p : a) {
    const double lr = std::get<double>(p.at("lr"));
    EXPECT_TRUE(lr >= 1e-4 && lr <= 1e-1);
    const int64_t h = std::get<int64_t>(p.at("hidden"));
    EXPECT_TRUE(h == 8 || h == 16);
  }
}

TEST(TuneSpace, GridIsTheProductOfTheAxes) {
  const auto c = load(std::string(kBase) + "[params.layers]\ntype = \"int\"\nlow = 1\nhigh = 3\n",
                      {"study.search=grid", "params.lr.points=4"});
  const auto trials = tune::make_trials(c);
  EXPECT_EQ(trials.size(), 2u * 3u * 4u);
  std::set<std::string> distinct;
  for (const auto& p : trials)
    distinct.insert(tune::value_text(p.at("hidden")) + "/" + tune::value_text(p.at("layers")) + "/" +
                    tune::value_text(p.at("lr")));
  EXPECT_EQ(distinct.size(), trials.size());
  EXPECT_DOUBLE_EQ(std::get<double>(trials.front().at("lr")), 1e-4);
}

TEST(TuneFolds, StratifiedFoldsHoldEveryRowOnceAndBalanceClasses) {
  tune::Dataset d;
  d.kind = tune::TaskKind::classification;
  d.rows = 90;
  d.classes = 3;
  for (int i = 0; i < 90; ++i) d.y.push_back(i < 60 ? 0.0f : (i < 81 ? 1.0f : 2.0f));
  const auto fold_of = tune::assign_folds(d, 3, 1, true);
  for (int f = 0; f < 3; ++f) {
    const auto s = tune::fold_split(fold_of, f);
    EXPECT_EQ(s.train.size() + s.eval.size(), 90u);
    int per_class[3] = {0, 0, 0};
    for (int64_t r : s.eval) ++per_class[static_cast<int>(d.y[r])];
    EXPECT_EQ(per_class[0], 20);
    EXPECT_EQ(per_class[1], 7);
    EXPECT_EQ(per_class[2], 3);
  }
}

TEST(TuneMetrics, KnownValues) {
  const std::vector<float> truth = {1, 2, 3, 4}, pred = {1, 2, 3, 6};
  EXPECT_DOUBLE_EQ(tune::score(tune::Metric::rmse, truth, pred, 0), 1.0);
  EXPECT_DOUBLE_EQ(tune::score(tune::Metric::mae, truth, pred, 0), 0.5);
  EXPECT_DOUBLE_EQ(tune::score(tune::Metric::r2, truth, pred, 0), 1.0 - 4.0 / 5.0);
  const std::vector<float> labels = {0, 1}, probs = {0.8f, 0.2f, 0.4f, 0.6f};
  EXPECT_DOUBLE_EQ(tune::score(tune::Metric::accuracy, labels, probs, 2), 1.0);
  EXPECT_NEAR(tune::score(tune::Metric::log_loss, labels, probs, 2), -(std::log(0.8) + std::log(0.6)) / 2, 1e-6);
}

TEST(TuneSchedule, OneTaskPerThreadOrThreadsSharedOut) {
  auto p = tune::plan_threads(100, 16, 0);
  EXPECT_EQ(p.workers, 16);
  EXPECT_EQ(p.threads_per_task, 1);
  p = tune::plan_threads(4, 16, 0);
  EXPECT_EQ(p.workers, 4);
  EXPECT_EQ(p.threads_per_task, 4);
  p = tune::plan_threads(100, 16, 2);  // forced
  EXPECT_EQ(p.workers, 8);
  EXPECT_EQ(p.threads_per_task, 2);
  std::vector<int> seen(50, 0);
  tune::run_tasks(50, tune::plan_threads(50, 2, 0), [&](int64_t i, int) { seen[i]++; });
  EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), 50);
  EXPECT_THROW(tune::run_tasks(10, tune::plan_threads(10, 2, 0),
                               [](int64_t i, int) { if (i == 3) aiscale::fail("task {} failed", i); }),
               aiscale::Error);
}

}  // namespace
