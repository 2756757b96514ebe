// `aiscale tune` end to end on one rank: a search that beats the defaults, resume, the
// scaling table for 1, 100 and 1,000 tiny models, the synthetic CSV, and bad input.
#include <gtest/gtest.h>

#include <fstream>

#include "../support/run_support.h"

using namespace aiscale::testsupport;

namespace {

std::string write_study(const fs::path& dir, const std::string& body) {
  const std::string cfg = "[study]\nname = \"t\"\ndir = \"" + (dir / "out").string() + "\"\nthreads = 2\n" + body;
  std::ofstream(dir / "study.toml") << cfg;
  return (dir / "study.toml").string();
}

nlohmann::json read_json(const fs::path& p) { return nlohmann::json::parse(read_bytes(p)); }

TEST(TuneCli, CsvSearchBeatsDefaultsAndResumes) {
  const fs::path dir = temp_dir("tune-cli-csv");
  auto r = run_aiscale("tune --synthetic-csv " + (dir / "data.csv").string() + " --rows 1500 --seed 3");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(read_bytes(dir / "data.csv").substr(0, 18), "x1,x2,x3,x4,x5,x6,");
  const std::string cfg = write_study(dir,
      "backend = \"mlp\"\nmetric = \"mae\"\ntrials = 6\nfolds = 3\n"
      "[data]\nsource = \"csv\"\npath = \"" + (dir / "data.csv").string() + "\"\ntarget = \"y\"\n"
      "[fixed]\nepochs = 8\n[params.lr]\ntype = \"log-uniform\"\nlow = 3e-3\nhigh = 3e-2\n");
  r = run_aiscale("tune " + cfg);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("better than the default"), std::string::npos) << r.output;
  const auto results = read_json(dir / "out/results.json");
  EXPECT_LT(results["best"]["score"].get<double>(), results["default"]["score"].get<double>());
  EXPECT_EQ(results["trials"].size(), 6u);
  EXPECT_TRUE(fs::exists(dir / "out/results.csv"));
  EXPECT_TRUE(fs::exists(dir / "out/best/model.json"));
  EXPECT_EQ(read_json(dir / "out/best/model.json")["format"], "aiscale-tune-mlp");
  // Interrupted: two tasks lost; the rerun does only those.
  fs::remove(dir / "out/tasks/r0_t00002_f1.json");
  fs::remove(dir / "out/tasks/default_f0.json");
  r = run_aiscale("tune " + cfg + " -q");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("2 tasks run, 19 resumed"), std::string::npos) << r.output;
  EXPECT_EQ(read_json(dir / "out/results.json")["best"], results["best"]);
  // Another configuration in the same directory is refused; --fresh starts over.
  r = run_aiscale("tune " + cfg + " --set study.trials=7");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("holds a study of another configuration"), std::string::npos) << r.output;
  r = run_aiscale("tune " + cfg + " -q --fresh --set study.trials=2");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("9 tasks run, 0 resumed"), std::string::npos) << r.output;
  fs::remove_all(dir);
}

// A search in which every trial diverged found nothing: the exit status says so, naming the
// study and its results.
TEST(TuneCli, EveryTrialDivergedExitsNonZero) {
  const fs::path dir = temp_dir("tune-cli-diverged");
  std::string body =
      "backend = \"mlp\"\nmetric = \"rmse\"\ntrials = 3\nfolds = 2\n[data]\nsource = \"synthetic\"\n"
      "synthetic_rows = 400\n[fixed]\nlr = 10.0\noptimizer = \"sgd\"\nepochs = 3\n"
      "[params.hidden]\ntype = \"choice\"\nvalues = [16, 32]\n";
  const std::string cfg = write_study(dir, body);
  auto r = run_aiscale("tune " + cfg + " -q");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("every one of the 3 trial(s) of " + cfg + " diverged (score NaN; see " +
                          (dir / "out").string() + "/results.csv)"), std::string::npos) << r.output;
  // With a learning rate that trains, the same search has a result.
  body.replace(body.find("lr = 10.0"), 9, "lr = 0.001");
  r = run_aiscale("tune " + write_study(dir, body) + " -q --fresh");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  fs::remove_all(dir);
}

TEST(TuneCli, ScalingTableForOneHundredAndThousandTinyModels) {
  const fs::path dir = temp_dir("tune-cli-scaling");
  const std::string cfg = write_study(dir,
      "backend = \"mlp\"\nfolds = 2\n[data]\nsource = \"synthetic\"\nsynthetic_rows = 100\n"
      "[fixed]\nepochs = 1\nbatch_size = 50\n[params.hidden]\ntype = \"int\"\nlow = 2\nhigh = 8\n");
  const auto r = run_aiscale("tune " + cfg + " --scaling 1,100,1000");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("models    tasks  threads       wall_s     serial_s   speedup  efficiency"), std::string::npos)
      << r.output;
  const auto doc = read_json(dir / "out/scaling.json");
  ASSERT_EQ(doc["rows"].size(), 3u);
  const int64_t models[] = {1, 100, 1000};
  for (size_t i = 0; i < 3; ++i) {
    const auto& row = doc["rows"][i];
    EXPECT_EQ(row["models"], models[i]);
    EXPECT_EQ(row["tasks"], 2 * models[i]);
    EXPECT_GT(row["wall_seconds"].get<double>(), 0.0);
    EXPECT_GT(row["serial_seconds"].get<double>(), 0.0);
    EXPECT_NEAR(row["speedup"].get<double>(),
                row["serial_seconds"].get<double>() / row["wall_seconds"].get<double>(), 1e-6);
  }
  const std::string csv = read_bytes(dir / "out/scaling.csv");
  EXPECT_EQ(csv.substr(0, csv.find('\n')),
            "models,tasks,threads,threads_per_task,wall_seconds,serial_seconds,speedup,efficiency,best_score");
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 4);
  fs::remove_all(dir);
}

TEST(TuneCli, JobArrayShardsRunTheirShareAndALaterRunMerges) {
  const fs::path dir = temp_dir("tune-cli-shard");
  const std::string body =
      "backend = \"mlp\"\ntrials = 4\nfolds = 2\n[data]\nsource = \"synthetic\"\nsynthetic_rows = 300\n"
      "[params.lr]\ntype = \"log-uniform\"\nlow = 1e-3\nhigh = 3e-2\n";
  const std::string cfg = write_study(dir, body);
  auto r = run_aiscale("tune " + cfg + " --shard 0/2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("shard 0/2: 5 tasks run, 0 resumed"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir / "out/results.json"));  // a shard merges nothing
  r = run_aiscale("tune " + cfg + " --shard array", "SLURM_ARRAY_TASK_ID=4 SLURM_ARRAY_TASK_MIN=3 SLURM_ARRAY_TASK_COUNT=2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("shard 1/2: 5 tasks run"), std::string::npos) << r.output;
  r = run_aiscale("tune " + cfg + " -q");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("0 tasks run, 10 resumed"), std::string::npos) << r.output;
  EXPECT_TRUE(fs::exists(dir / "out/results.json"));
  EXPECT_NE(run_aiscale("tune " + cfg + " --shard 2/2").output.find("K must be below N"), std::string::npos);
  EXPECT_NE(run_aiscale("tune " + cfg + " --shard 0/2 --fresh").output.find("cannot be combined with --fresh"),
            std::string::npos);
  r = run_aiscale("tune " + cfg + " --shard array", "env -u SLURM_ARRAY_TASK_ID -u SLURM_ARRAY_TASK_COUNT");
  EXPECT_NE(r.output.find("SLURM_ARRAY_TASK_ID and SLURM_ARRAY_TASK_COUNT are not set"), std::string::npos) << r.output;
  const std::string halving = write_study(dir, body + "[halving]\nmin_budget = 1\nmax_budget = 3\n");
  r = run_aiscale("tune " + halving + " --shard 0/2 --set study.dir=" + (dir / "h").string());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("successive halving needs every result of a rung"), std::string::npos) << r.output;
  fs::remove_all(dir);
}

TEST(TuneCli, BadInputFailsNamingTheInputAndWritesNothing) {
  const fs::path dir = temp_dir("tune-cli-bad");
  std::ofstream(dir / "bad.csv") << "a,b,y\n1,2,3\n4,x,6\n";
  std::string cfg = write_study(dir, "[data]\nsource = \"csv\"\npath = \"" + (dir / "bad.csv").string() +
                                         "\"\ntarget = \"y\"\n[params.lr]\ntype = \"uniform\"\nlow = 0.1\nhigh = 0.2\n");
  auto r = run_aiscale("tune " + cfg);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("line 3, column 'b': 'x' is not a number"), std::string::npos) << r.output;
  r = run_aiscale("tune " + cfg + " --set data.target=price");
  EXPECT_NE(r.output.find("no target column 'price'"), std::string::npos) << r.output;
  std::ofstream(dir / "bad.csv") << "a,b,y\n1,2,3\n4,,6\n";
  r = run_aiscale("tune " + cfg);
  EXPECT_NE(r.output.find("line 3, column 'b': missing value"), std::string::npos) << r.output;
  std::ofstream(dir / "bad.csv") << "a,b,y\n1,2,3\n4,5,6\n";
  r = run_aiscale("tune " + cfg + " --set study.folds=3");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("study.folds = 3 is more than the 2 rows"), std::string::npos) << r.output;
  r = run_aiscale("tune " + cfg + " --set params.lr.low=0.3");
  EXPECT_NE(r.output.find("params.lr: the range [0.3, 0.2] is empty"), std::string::npos) << r.output;
  r = run_aiscale("tune " + cfg + " --set study.folsd=2");
  EXPECT_NE(r.output.find("did you mean 'folds'?"), std::string::npos) << r.output;
  r = run_aiscale("tune " + cfg + " --scaling 1,x");
  EXPECT_NE(r.output.find("--scaling (a model count) = 'x' is not an integer"), std::string::npos) << r.output;
  r = run_aiscale("tune " + (dir / "missing.toml").string());
  EXPECT_NE(r.output.find("tune config '" + (dir / "missing.toml").string() + "' cannot be read"), std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(dir / "out/results.json"));
  fs::remove_all(dir);
}

}  // namespace
