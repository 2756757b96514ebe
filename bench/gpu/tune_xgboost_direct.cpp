// XGBoost called directly, for comparison with `aiscale tune --scaling`: the same work per
// model (k-fold cross-validation: per fold a DMatrix of the training rows, `rounds` boosting
// rounds, a prediction of the held-out rows) for `models` models on `threads` threads, one
// model per thread with nthread = 1. Prints one JSON line with models per second.
// Built by bench/gpu/tune_scaling.sh (c++ ... -lxgboost), never linked into aiscale.
//   tune_xgboost_direct DATA.csv MODELS THREADS ROUNDS DEPTH FOLDS
#include <xgboost/c_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

#define XGB(call)                                                             \
  do {                                                                        \
    if ((call) != 0) {                                                        \
      std::fprintf(stderr, "xgboost: %s\n", XGBGetLastError());               \
      std::exit(1);                                                           \
    }                                                                         \
  } while (0)

// The synthetic CSV of `aiscale tune --synthetic-csv`: a header, then numbers; last column y.
void read_csv(const char* path, std::vector<float>& x, std::vector<float>& y, long& rows, long& cols) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  cols = static_cast<long>(std::count(line.begin(), line.end(), ',')); // features
  rows = 0;
  while (std::getline(in, line)) {
    std::stringstream ss(line);
    std::string cell;
    for (long c = 0; c <= cols && std::getline(ss, cell, ','); ++c)
      (c < cols ? x : y).push_back(std::strtof(cell.c_str(), nullptr));
    ++rows;
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 7) {
    std::fprintf(stderr, "usage: %s DATA.csv MODELS THREADS ROUNDS DEPTH FOLDS\n", argv[0]);
    return 2;
  }
  std::vector<float> x, y;
  long rows = 0, cols = 0;
  read_csv(argv[1], x, y, rows, cols);
  const long models = std::atol(argv[2]), threads = std::atol(argv[3]), rounds = std::atol(argv[4]);
  const std::string depth = argv[5];
  const long folds = std::atol(argv[6]);
  // Fold f holds rows r with r % folds == f (the same sizes as aiscale's folds).
  std::vector<std::vector<float>> train_x(folds), train_y(folds), eval_x(folds);
  for (long r = 0; r < rows; ++r)
    for (long f = 0; f < folds; ++f) {
      auto& dst = (r % folds == f) ? eval_x[f] : train_x[f];
      dst.insert(dst.end(), x.begin() + r * cols, x.begin() + (r + 1) * cols);
      if (r % folds != f) train_y[f].push_back(y[r]);
    }
  std::atomic<long> next{0};
  double checksum = 0;
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  std::vector<double> sums(threads, 0.0);
  for (long t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (long task; (task = next.fetch_add(1)) < models * folds;) {
        const long f = task % folds;
        DMatrixHandle dtrain, deval;
        XGB(XGDMatrixCreateFromMat_omp(train_x[f].data(), train_y[f].size(), cols, NAN, &dtrain, 1));
        XGB(XGDMatrixSetFloatInfo(dtrain, "label", train_y[f].data(), train_y[f].size()));
        XGB(XGDMatrixCreateFromMat_omp(eval_x[f].data(), eval_x[f].size() / cols, cols, NAN, &deval, 1));
        BoosterHandle b;
        XGB(XGBoosterCreate(&dtrain, 1, &b));
        XGB(XGBoosterSetParam(b, "nthread", "1"));
        XGB(XGBoosterSetParam(b, "verbosity", "0"));
        XGB(XGBoosterSetParam(b, "tree_method", "hist"));
        XGB(XGBoosterSetParam(b, "objective", "reg:squarederror"));
        XGB(XGBoosterSetParam(b, "max_depth", depth.c_str()));
        for (long i = 0; i < rounds; ++i) XGB(XGBoosterUpdateOneIter(b, static_cast<int>(i), dtrain));
        const bst_ulong* shape;
        bst_ulong dim;
        const float* out;
        XGB(XGBoosterPredictFromDMatrix(b, deval, R"({"type": 0, "training": false, "iteration_begin": 0, "iteration_end": 0, "strict_shape": false})",
                                        &shape, &dim, &out));
        sums[t] += out[0];
        XGBoosterFree(b);
        XGDMatrixFree(dtrain);
        XGDMatrixFree(deval);
      }
    });
  for (auto& t : pool) t.join();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (double s : sums) checksum += s;
  std::printf("{\"tool\": \"xgboost-direct\", \"models\": %ld, \"folds\": %ld, \"threads\": %ld, \"rounds\": %ld, "
              "\"wall_seconds\": %.6f, \"models_per_second\": %.3f, \"checksum\": %.6g}\n",
              models, folds, threads, rounds, wall, models / wall, checksum);
  return 0;
}
