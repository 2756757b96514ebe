// Studies of training runs (study.backend = "train"): the keys they search or fix are the
// training config's, with its ranges; the mistakes a user makes are named with their fix;
// asynchronous successive halving's rungs and decisions.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "../support/error_of.h"
#include "../support/run_support.h"
#include "aiscale/sweep/asha.h"
#include "aiscale/sweep/train_search.h"
#include "aiscale/tune/space.h"

using namespace aiscale;
using namespace aiscale::testsupport;

namespace {

struct StudyFiles {
  fs::path dir = temp_dir("tune-train-space");
  ~StudyFiles() { fs::remove_all(dir); }
  tune::StudyConfig load(const std::string& body, const std::vector<std::string>& overrides = {}) {
    tiny_config(dir);
    std::ofstream(dir / "s.toml") << "[study]\nbackend = \"train\"\ntrials = 4\n[train]\nconfig = \"tiny.toml\"\n" << body;
    const auto keys = sweep::train_key_catalogue();
    return tune::load_study_config((dir / "s.toml").string(), overrides, &keys);
  }
  std::string error(const std::string& body) {
    return error_of([&] { load(body); });
  }
};

TEST(TuneTrainSpace, KeysOfTheTrainingConfigWithItsValuesAsDefaults) {
  StudyFiles f;
  const auto c = f.load("[fixed]\ntrain.steps = 30\n[halving]\nmin_budget = 5\n"
                        "[params.\"train.lr\"]\ntype = \"log-uniform\"\nlow = 1e-4\nhigh = 1e-2\n"
                        "[params.train.warmup_steps]\ntype = \"uniform\"\nlow = 0\nhigh = 4\n"
                        "[params.train.schedule]\ntype = \"choice\"\nvalues = [\"cosine\", \"linear\"]\n"
                        "[params.train.recompute]\ntype = \"choice\"\nvalues = [true, false]\n");
  EXPECT_EQ(c.backend, tune::Backend::train);
  EXPECT_EQ(c.metric, tune::Metric::val_loss);
  ASSERT_EQ(c.params.size(), 4u);
  EXPECT_EQ(std::get<int64_t>(c.fixed.at("train.steps")), 30);
  EXPECT_EQ(c.halving.max_budget, 30);  // the trials' own length
  EXPECT_EQ(c.halving.min_budget, 5);
  // The config's values are the keys' defaults (tiny.toml trains 20 steps at lr 3e-3).
  for (const auto& h : c.train_keys) {
    if (h.name == "train.steps") EXPECT_EQ(std::get<int64_t>(h.default_value), 20);
    if (h.name == "train.lr") EXPECT_DOUBLE_EQ(std::get<double>(h.default_value), 3e-3);
  }
  const auto trials = tune::make_trials(c);
  ASSERT_EQ(trials.size(), 4u);
  for (const auto& t : trials) {
    const double lr = std::get<double>(t.at("train.lr"));
    EXPECT_GE(lr, 1e-4);
    EXPECT_LE(lr, 1e-2);
    // An integer key over a uniform range takes the rounded draw.
    const int64_t warmup = std::get<int64_t>(t.at("train.warmup_steps"));
    EXPECT_TRUE(warmup >= 0 && warmup <= 4) << warmup;
    const std::string rc = std::get<std::string>(t.at("train.recompute"));
    EXPECT_TRUE(rc == "true" || rc == "false");
  }
}

TEST(TuneTrainSpace, OverridesReachQuotedKeys) {
  StudyFiles f;
  const std::string body = "[fixed]\n\"train.steps\" = 30\n[params.\"train.lr\"]\ntype = \"uniform\"\nlow = 0.001\nhigh = 0.01\n";
  EXPECT_EQ(std::get<int64_t>(f.load(body, {"fixed.\"train.steps\"=40"}).fixed.at("train.steps")), 40);
  EXPECT_DOUBLE_EQ(f.load(body, {"params.\"train.lr\".high=0.02"}).params.at(0).high, 0.02);
  // The same key spelt both ways is refused, not silently one of them.
  const std::string twice = error_of([&] { f.load(body, {"fixed.train.steps=40"}); });
  EXPECT_NE(twice.find("'train.steps' is given twice in [fixed]"), std::string::npos) << twice;
}

TEST(TuneTrainSpace, MistakesAreNamedWithTheirFix) {
  StudyFiles f;
  EXPECT_NE(f.error("[params.\"train.lrr\"]\ntype = \"uniform\"\nlow = 1\nhigh = 2\n").find("did you mean 'train.lr'"),
            std::string::npos);
  EXPECT_NE(f.error("[params.\"train.lr\"]\ntype = \"uniform\"\nlow = 0.1\nhigh = 0.01\n").find("is empty"),
            std::string::npos);
  EXPECT_NE(f.error("[params.\"train.lr\"]\ntype = \"uniform\"\nlow = 0.1\nhigh = 2000\n").find("train.lr"),
            std::string::npos);  // beyond the key's own range
  EXPECT_NE(f.error("[params.\"train.schedule\"]\ntype = \"choice\"\nvalues = [\"cosine\", \"sqrt\"]\n").find("cosine"),
            std::string::npos);
  EXPECT_NE(f.error("[halving]\nmin_budget = 20\n").find("no trial could be stopped early"), std::string::npos);
  EXPECT_NE(f.error("[halving]\nmin_budget = 2\nmax_budget = 10\n").find("the last rung is the end of training"),
            std::string::npos);
  EXPECT_NE(f.error("[data]\nsource = \"synthetic\"\n").find("a train study's data is the [data] of its training config"),
            std::string::npos);
  EXPECT_NE(f.error("[train]\n").find("not valid TOML at line"), std::string::npos);  // [train] twice
  EXPECT_NE(f.error("[train2]\n").find("unknown section"), std::string::npos);
  // The training config named must exist.
  std::ofstream(f.dir / "m.toml") << "[study]\nbackend = \"train\"\n[train]\nconfig = \"missing.toml\"\n";
  const auto keys = sweep::train_key_catalogue();
  const std::string missing = error_of([&] { tune::load_study_config((f.dir / "m.toml").string(), {}, &keys); });
  EXPECT_NE(missing.find("missing.toml"), std::string::npos) << missing;
  // [train] in an mlp study.
  std::ofstream(f.dir / "x.toml") << "[study]\nbackend = \"mlp\"\n[train]\nconfig = \"tiny.toml\"\n";
  const std::string mlp = error_of([&] { tune::load_study_config((f.dir / "x.toml").string(), {}, &keys); });
  EXPECT_NE(mlp.find("add study.backend = \"train\""), std::string::npos) << mlp;
}

TEST(TuneTrainSpace, AStudyThatCannotFitOneTrialIsRefused) {
  StudyFiles f;
  tiny_config(f.dir);
  auto study = [&](const std::string& body) {
    std::ofstream(f.dir / "s.toml") << "[study]\nbackend = \"train\"\ntrials = 2\ndir = \"" << (f.dir / "out").string()
                                    << "\"\n[train]\nconfig = \"tiny.toml\"\n" << body
                                    << "[params.\"train.lr\"]\ntype = \"log-uniform\"\nlow = 1e-4\nhigh = 1e-2\n";
    return "tune " + (f.dir / "s.toml").string();
  };
  // GPU trials where no GPU is visible.
  auto r = run_aiscale(study("gpus_per_trial = 1\n[fixed]\n\"train.device\" = \"cuda\"\n"), "CUDA_VISIBLE_DEVICES=");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("each trial needs 1 GPU(s) (train.gpus_per_trial), but 0 are available"), std::string::npos)
      << r.output;
  // GPUs asked of CPU trials.
  r = run_aiscale(study("gpus_per_trial = 1\n"));
  EXPECT_NE(r.output.find("the trials train on the CPU"), std::string::npos) << r.output;
  // Job steps outside a Slurm allocation.
  r = run_aiscale(study("launcher = \"srun\"\n"), "env -u SLURM_JOB_ID");
  EXPECT_NE(r.output.find("not inside one (SLURM_JOB_ID is not set)"), std::string::npos) << r.output;
  // More ranks per trial than the allocation has tasks.
  r = run_aiscale(study("launcher = \"srun\"\nranks_per_trial = 4\n"), "SLURM_JOB_ID=1 SLURM_NTASKS=2");
  EXPECT_NE(r.output.find("no trial fits; ask sbatch for at least 4 tasks"), std::string::npos) << r.output;
  // Options of the table searches.
  r = run_aiscale(study("") + " --scaling 1,10");
  EXPECT_NE(r.output.find("--scaling belongs to mlp and xgboost studies"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(f.dir / "out/trials/trial-000")) << "no trial may start";
}

TEST(Asha, RungsAreGeometricBelowTheEnd) {
  EXPECT_EQ(sweep::asha_rungs(10, 60, 3), (std::vector<int64_t>{10, 30}));
  EXPECT_EQ(sweep::asha_rungs(1, 100, 2), (std::vector<int64_t>{1, 2, 4, 8, 16, 32, 64}));
  EXPECT_EQ(sweep::asha_rungs(50, 60, 3), (std::vector<int64_t>{50}));
  EXPECT_TRUE(sweep::asha_rungs(60, 60, 3).empty());
}

TEST(Asha, KeepsTheBestThirdOfWhatEachRungHasSeen) {
  sweep::Asha a(3, {10, 30});
  EXPECT_TRUE(a.record(0, 10, 5.0));    // first at the rung: the best of one
  EXPECT_FALSE(a.record(1, 10, 6.0));   // 2 seen, keep 1: trial 0
  EXPECT_TRUE(a.record(2, 10, 4.0));    // the best so far
  EXPECT_FALSE(a.record(3, 10, 4.5));   // 4 seen, keep 1
  EXPECT_FALSE(a.record(4, 10, 4.8));   // 5 seen, keep 1
  EXPECT_TRUE(a.record(5, 10, 4.2));    // 6 seen, keep 2: 4.0 and 4.2
  EXPECT_FALSE(a.record(6, 10, std::nan("")));  // a diverged trial never goes on
  EXPECT_TRUE(a.record(7, 10, 9.0, /*exempt=*/true));  // the default configuration goes on
  EXPECT_FALSE(a.record(1, 10, 1.0));   // asked again: the first decision stands
  EXPECT_TRUE(a.is_rung(30));
  EXPECT_FALSE(a.is_rung(20));
  const auto order = a.recorded(10);
  ASSERT_EQ(order.size(), 8u);
  EXPECT_EQ(order.front().second, 2);
  EXPECT_EQ(order.back().second, 6);  // NaN last
  // Decisions read back from a study directory are kept as they were.
  sweep::Asha b(3, {10});
  b.restore(0, 10, 7.0, false);
  EXPECT_FALSE(b.record(0, 10, 1.0));
}

}  // namespace
