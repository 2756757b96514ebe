// Gradient-boosted trees through XGBoost's C API (Debian's libxgboost-dev). The scheduler
// sets each model's nthread, so many boosters train side by side without oversubscribing.
#include "aiscale/core/error.h"
#include "aiscale/tune/model.h"

#ifdef AISCALE_HAVE_XGBOOST
#include <xgboost/c_api.h>

#include <cmath>
#include <filesystem>

#include <fmt/format.h>

namespace aiscale::tune {
namespace {

void check(int status, const char* what) {
  if (status != 0) fail("XGBoost failed to {}: {}", what, XGBGetLastError());
}

// One DMatrix owned for its lifetime.
struct DMatrix {
  DMatrixHandle handle = nullptr;
  explicit DMatrix(const Matrix& m, bool with_labels, int threads) {
    check(XGDMatrixCreateFromMat_omp(m.x.data(), static_cast<bst_ulong>(m.rows),
                                     static_cast<bst_ulong>(m.features), std::nanf(""), &handle, threads),
          "build a data matrix");
    if (with_labels)
      check(XGDMatrixSetFloatInfo(handle, "label", m.y.data(), static_cast<bst_ulong>(m.rows)), "set the labels");
  }
  ~DMatrix() {
    if (handle) XGDMatrixFree(handle);
  }
  DMatrix(const DMatrix&) = delete;
  DMatrix& operator=(const DMatrix&) = delete;
};

class Booster final : public Model {
 public:
  Booster(const Matrix& train, const FitOptions& o) : kind_(o.kind), classes_(o.classes), threads_(o.threads) {
    DMatrix dtrain(train, true, o.threads);
    check(XGBoosterCreate(&dtrain.handle, 1, &booster_), "create a booster");
    auto set = [&](const char* key, const std::string& value) {
      check(XGBoosterSetParam(booster_, key, value.c_str()), "set a parameter");
    };
    set("nthread", std::to_string(o.threads));
    set("verbosity", "0");
    set("tree_method", "hist");
    set("seed", std::to_string(o.seed % 2147483647));
    if (kind_ == TaskKind::classification) {
      set("objective", "multi:softprob");
      set("num_class", std::to_string(classes_));
    } else {
      set("objective", "reg:squarederror");
    }
    for (const char* key : {"max_depth", "max_bin"}) set(key, std::to_string(param_int(o.params, key)));
    for (const char* key : {"eta", "subsample", "colsample_bytree", "min_child_weight", "lambda", "alpha", "gamma"})
      set(key, fmt::format("{}", param_real(o.params, key)));
    const int64_t rounds = param_int(o.params, "num_round");
    for (int64_t i = 0; i < rounds; ++i)
      check(XGBoosterUpdateOneIter(booster_, static_cast<int>(i), dtrain.handle), "train a boosting round");
  }
  ~Booster() override {
    if (booster_) XGBoosterFree(booster_);
  }

  std::vector<float> predict(const Matrix& m) const override {
    DMatrix d(m, false, threads_);
    const char* config = R"({"type": 0, "training": false, "iteration_begin": 0, "iteration_end": 0, "strict_shape": false})";
    const bst_ulong* shape = nullptr;
    bst_ulong dim = 0;
    const float* result = nullptr;
    check(XGBoosterPredictFromDMatrix(booster_, d.handle, config, &shape, &dim, &result), "predict");
    const size_t expected = static_cast<size_t>(m.rows * (kind_ == TaskKind::classification ? classes_ : 1));
    return std::vector<float>(result, result + expected);
  }

  void save(const std::string& path) const override {
    const std::string tmp = path + ".tmp";
    check(XGBoosterSaveModel(booster_, tmp.c_str()), "save the model");
    std::filesystem::rename(tmp, path);
  }
  std::string file_extension() const override { return ".json"; }

 private:
  TaskKind kind_;
  int64_t classes_;
  int threads_;
  BoosterHandle booster_ = nullptr;
};

}  // namespace

std::unique_ptr<Model> fit_xgboost(const Matrix& train, const FitOptions& o) {
  return std::make_unique<Booster>(train, o);
}
bool xgboost_compiled() { return true; }

}  // namespace aiscale::tune
#else
namespace aiscale::tune {

std::unique_ptr<Model> fit_xgboost(const Matrix&, const FitOptions&) {
  fail("study.backend = \"xgboost\": this aiscale was built without XGBoost: install Debian's "
       "libxgboost-dev (scripts/setup.sh does) and rebuild, or use backend = \"mlp\"");
}
bool xgboost_compiled() { return false; }

}  // namespace aiscale::tune
#endif
