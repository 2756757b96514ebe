// `aiscale tune` on 2 MPI ranks and 2 cores: random search with successive halving over the
// engine's MLP and over XGBoost, on subsampled Fashion-MNIST and on the synthetic
// regression, each beating the default hyperparameters' cross-validated score, with the
// tasks spread over both ranks and one merged table.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <set>

#include "../support/run_support.h"
#include "aiscale/tune/model.h"

using namespace aiscale::testsupport;

namespace {

const std::string kFashion = "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz";

RunOutput two_ranks(const std::string& args) {
  std::string mpirun = "timeout 300 mpirun --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 -np 2";
  if (::geteuid() == 0) mpirun += " --allow-run-as-root";
  return run_command(mpirun + " " + AISCALE_BINARY + " " + args);
}

// Runs the study on 2 ranks; checks the merged results and returns them.
nlohmann::json search_on_two_ranks(const std::string& name, const std::string& body) {
  const fs::path dir = temp_dir("tune-mpi-" + name);
  std::ofstream(dir / "study.toml") << "[study]\nname = \"" << name << "\"\ndir = \"" << (dir / "out").string()
                                    << "\"\nseed = 1\n" << body;
  const RunOutput r = two_ranks("tune " + (dir / "study.toml").string());
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("on 2 ranks"), std::string::npos) << r.output;
  const auto results = nlohmann::json::parse(read_bytes(dir / "out/results.json"));
  EXPECT_EQ(results["ranks"], 2);
  std::set<int> ranks;
  for (const auto& f : fs::directory_iterator(dir / "out/tasks"))
    ranks.insert(nlohmann::json::parse(read_bytes(f.path()))["rank"].get<int>());
  EXPECT_EQ(ranks, (std::set<int>{0, 1}));
  EXPECT_TRUE(fs::exists(dir / "out/best/model.json"));
  EXPECT_NE(r.output.find("better than the default"), std::string::npos) << r.output;
  fs::remove_all(dir);
  return results;
}

void expect_beats_default(const nlohmann::json& results) {
  const double best = results["best"]["score"].get<double>(), def = results["default"]["score"].get<double>();
  if (results["higher_is_better"].get<bool>()) EXPECT_GT(best, def) << results["best"].dump();
  else EXPECT_LT(best, def) << results["best"].dump();
}

const char* kSynthetic = "[data]\nsource = \"synthetic\"\nsynthetic_rows = 1200\n";
const char* kFashionData = "[data]\nsource = \"idx\"\nrows = 600\nimage_pool = 2\n";

TEST(TuneMpi, MlpOnTheSyntheticRegression) {
  expect_beats_default(search_on_two_ranks("mlp-synthetic",
      std::string("backend = \"mlp\"\ntrials = 6\nfolds = 3\n") + kSynthetic +
      "[halving]\neta = 3\nmin_budget = 3\nmax_budget = 9\n"
      "[params.lr]\ntype = \"log-uniform\"\nlow = 3e-3\nhigh = 3e-2\n"
      "[params.hidden]\ntype = \"choice\"\nvalues = [16, 32]\n"));
}

TEST(TuneMpi, XgboostOnTheSyntheticRegression) {
  if (!aiscale::tune::xgboost_compiled()) GTEST_SKIP() << "built without XGBoost (libxgboost-dev)";
  expect_beats_default(search_on_two_ranks("xgb-synthetic",
      std::string("backend = \"xgboost\"\ntrials = 6\nfolds = 3\n") + kSynthetic +
      "[halving]\neta = 3\nmin_budget = 10\nmax_budget = 30\n"
      "[params.max_depth]\ntype = \"int\"\nlow = 2\nhigh = 6\n"
      "[params.eta]\ntype = \"log-uniform\"\nlow = 0.05\nhigh = 0.5\n"));
}

TEST(TuneMpi, MlpOnFashionMnist) {
  if (!fs::exists(kFashion)) GTEST_SKIP() << "dataset-fashion-mnist is not installed (scripts/setup.sh)";
  expect_beats_default(search_on_two_ranks("mlp-fashion",
      std::string("backend = \"mlp\"\nmetric = \"accuracy\"\ntrials = 6\nfolds = 2\n") + kFashionData +
      "[halving]\neta = 3\nmin_budget = 3\nmax_budget = 9\n"
      "[params.lr]\ntype = \"log-uniform\"\nlow = 2e-3\nhigh = 2e-2\n"
      "[params.hidden]\ntype = \"choice\"\nvalues = [32, 64]\n"));
}

TEST(TuneMpi, XgboostOnFashionMnist) {
  if (!aiscale::tune::xgboost_compiled()) GTEST_SKIP() << "built without XGBoost (libxgboost-dev)";
  if (!fs::exists(kFashion)) GTEST_SKIP() << "dataset-fashion-mnist is not installed (scripts/setup.sh)";
  expect_beats_default(search_on_two_ranks("xgb-fashion",
      std::string("backend = \"xgboost\"\nmetric = \"log-loss\"\ntrials = 4\nfolds = 2\n") + kFashionData +
      "[fixed]\nmax_bin = 16\n"
      "[halving]\neta = 2\nmin_budget = 5\nmax_budget = 20\n"
      "[params.max_depth]\ntype = \"int\"\nlow = 2\nhigh = 4\n"
      "[params.eta]\ntype = \"log-uniform\"\nlow = 0.1\nhigh = 0.4\n"));
}

}  // namespace

namespace {

// The scaling table on 2 ranks: each count's tasks are spread over both, the serial time
// summed over them.
TEST(TuneMpi, ScalingTableOnTwoRanks) {
  const fs::path dir = temp_dir("tune-mpi-scaling");
  std::ofstream(dir / "s.toml") << "[study]\nname = \"scaling\"\nfolds = 2\ndir = \"" << (dir / "out").string()
                                << "\"\n[data]\nsource = \"synthetic\"\nsynthetic_rows = 100\n"
                                << "[fixed]\nepochs = 1\nbatch_size = 50\n[params.hidden]\ntype = \"int\"\nlow = 2\nhigh = 8\n";
  const RunOutput r = two_ranks("tune " + (dir / "s.toml").string() + " --scaling 1,100,1000");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto doc = nlohmann::json::parse(read_bytes(dir / "out/scaling.json"));
  EXPECT_EQ(doc["ranks"], 2);
  ASSERT_EQ(doc["rows"].size(), 3u);
  for (const auto& row : doc["rows"]) {
    EXPECT_EQ(row["threads"], 2);  // one thread on each rank (OMP_NUM_THREADS=1)
    EXPECT_GT(row["serial_seconds"].get<double>(), 0.0);
  }
  EXPECT_EQ(doc["rows"][2]["tasks"], 2000);
  fs::remove_all(dir);
}

}  // namespace

namespace {

// Rank 0 refusing the directory (another study's) ends both ranks at once, naming why.
TEST(TuneMpi, OneRanksErrorEndsEveryRank) {
  const fs::path dir = temp_dir("tune-mpi-error");
  std::ofstream(dir / "s.toml") << "[study]\nfolds = 2\ntrials = 2\ndir = \"" << (dir / "out").string()
                                << "\"\n[data]\nsource = \"synthetic\"\nsynthetic_rows = 100\n"
                                << "[fixed]\nepochs = 1\n[params.hidden]\ntype = \"int\"\nlow = 2\nhigh = 8\n";
  ASSERT_EQ(two_ranks("tune " + (dir / "s.toml").string() + " -q").exit_code, 0);
  const RunOutput r = two_ranks("tune " + (dir / "s.toml").string() + " --set study.trials=3");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.exit_code, 124) << r.output;  // not left to time out
  EXPECT_NE(r.output.find("rank 0: '" + (dir / "out").string() + "' holds a study of another configuration"),
            std::string::npos) << r.output;
  fs::remove_all(dir);
}

}  // namespace
