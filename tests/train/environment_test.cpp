// environment.json (every run directory) and the MLLOG lines of `--mllog`.
#include <gtest/gtest.h>

#include "aiscale/train/environment.h"
#include "../support/run_support.h"

using namespace aiscale;
using namespace aiscale::testsupport;

namespace {

TEST(Environment, TrainingRunRecordsBuildLibrariesRanksAndConfigHash) {
  const fs::path dir = temp_dir("environment");
  write_byte_shards(dir);
  const std::string config = tiny_config(dir);
  auto r = run_aiscale("train -q -c " + config + " --mllog --set train.steps=3 train.warmup_steps=1 "
                       "train.eval_every=2 run.name=env", "OMP_PROC_BIND=false NCCL_DEBUG=WARN");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const fs::path run = dir / "runs/env";
  const auto j = nlohmann::json::parse(read_bytes(run / "environment.json"));
  EXPECT_EQ(j["aiscale_version"], AISCALE_VERSION);
  EXPECT_FALSE(j["git_commit"].get<std::string>().empty());
  EXPECT_FALSE(j["build"]["compiler"].get<std::string>().empty());
  for (const char* lib : {"cuda_runtime", "cuda_driver", "nvidia_driver", "cudnn", "nccl", "mpi", "openblas"})
    EXPECT_TRUE(j["libraries"].contains(lib)) << lib;
  EXPECT_NE(j["libraries"]["openblas"].get<std::string>().find("OpenBLAS"), std::string::npos);
  ASSERT_EQ(j["ranks"].size(), 1u);
  EXPECT_EQ(j["ranks"][0]["rank"], 0);
  EXPECT_FALSE(j["ranks"][0]["host"].get<std::string>().empty());
  EXPECT_NE(j["command_line"].get<std::string>().find("train -q -c"), std::string::npos);
  EXPECT_EQ(j["environment"]["OMP_PROC_BIND"], "false");
  EXPECT_EQ(j["environment"]["NCCL_DEBUG"], "WARN");
  EXPECT_EQ(j["config_hash"]["algorithm"], "fnv1a64");
  EXPECT_EQ(j["config_hash"]["value"], train::fnv1a64_hex(read_bytes(run / "config.toml")));

  // MLLOG: every line parses, the standard keys are there, intervals pair up.
  std::ifstream in(run / "mllog.txt");
  std::string line;
  std::map<std::string, int> keys;
  int open_blocks = 0;
  while (std::getline(in, line)) {
    ASSERT_EQ(line.rfind(":::MLLOG ", 0), 0u) << line;
    const auto e = nlohmann::json::parse(line.substr(9));
    for (const char* k : {"namespace", "time_ms", "event_type", "key", "value", "metadata"})
      ASSERT_TRUE(e.contains(k)) << line;
    EXPECT_TRUE(e["metadata"].contains("file") && e["metadata"].contains("lineno")) << line;
    EXPECT_EQ(e["metadata"]["file"].get<std::string>().rfind("src/aiscale/", 0), 0u) << line;
    keys[e["key"]]++;
    if (e["key"] == "block_start") ++open_blocks;
    if (e["key"] == "block_stop") --open_blocks;
    if (e["key"] == "run_stop") {
      EXPECT_EQ(e["metadata"]["status"], "success");
    }
    if (e["key"] == "global_batch_size") {
      EXPECT_EQ(e["value"], 4);
    }
  }
  EXPECT_EQ(open_blocks, 0);
  for (const char* k : {"submission_benchmark", "submission_org", "submission_division",
                        "submission_status", "submission_platform", "global_batch_size",
                        "opt_base_learning_rate", "train_samples", "init_start", "init_stop",
                        "run_start", "run_stop", "block_start", "block_stop", "epoch_start",
                        "epoch_stop", "eval_accuracy"})
    EXPECT_GT(keys[k], 0) << k;
  EXPECT_EQ(keys["eval_accuracy"], 2);  // after step 2 and at the end
}

TEST(Environment, BenchRunDirectoryHasOne) {
  const fs::path dir = temp_dir("environment-bench");
  auto r = run_aiscale("bench language --n-layer 1 --n-head 2 --n-embd 32 --vocab-size 256 "
                       "--block-size 32 --seq-len 32 --batch-size 2 --threads 1 --steps 2 --warmup 1 "
                       "--run-dir " + (dir / "b").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(read_bytes(dir / "b/environment.json"));
  EXPECT_EQ(j["device"], "cpu");
  EXPECT_EQ(j["ranks"].size(), 1u);
  EXPECT_EQ(j["config_hash"]["value"].get<std::string>().size(), 16u);
}

}  // namespace
