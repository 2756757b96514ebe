// `aiscale plan --emit DIR`: the chosen row of a plan for a CPU partition becomes a training
// config and a Slurm script, and the config trains as written on the ranks the plan chose
// (through `aiscale launch`, one rank per planned node), in the folder the user runs it from.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "aiscale/train/config.h"
#include "../support/run_support.h"

using namespace aiscale;
using namespace aiscale::testsupport;

namespace {

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(PlanEmit, CpuRowTrainsAsWrittenOnItsRanks) {
  const fs::path dir = temp_dir("plan-emit");
  write_byte_shards(dir);
  // gpt-tiny (byte vocabulary) on 2 nodes of a CPU partition: a global batch of 4 sequences
  // of 64 tokens, 768 tokens = 3 steps.
  const std::string shards = (dir / "tiny_train_*.bin").string();
  RunOutput r = run_command("cd '" + dir.string() + "' && " + std::string(AISCALE_BINARY) +
                            " plan --model gpt-tiny --tokens 768 --global-batch 4 --system karolina/cpu "
                            "--gpus 2 --emit emitted --emit-data '" + shards + "'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("Emitted row 1 (karolina/cpu on 2 nodes)"), std::string::npos) << r.output;
  const fs::path config = dir / "emitted" / "train.toml";
  const fs::path script = dir / "emitted" / "job.sbatch";
  ASSERT_TRUE(fs::exists(config)) << r.output;
  ASSERT_TRUE(fs::exists(script)) << r.output;

  // The config is the plan's row: 2 ranks' layout, 3 steps, the shards given.
  const train::TrainConfig c = train::load_train_config(config.string(), {});
  EXPECT_EQ(c.device, "cpu");
  EXPECT_EQ(c.steps, 3);
  EXPECT_EQ(c.train_data, shards);
  const int64_t model_ranks = c.tensor_parallel * c.pipeline_parallel;
  ASSERT_EQ(2 % model_ranks, 0) << read_text(config);
  EXPECT_EQ(c.batch_size * c.grad_accum * (2 / model_ranks), 4) << read_text(config);  // rows per step

  // The script runs that config on 2 nodes, one rank each.
  const std::string s = read_text(script);
  EXPECT_NE(s.find("#SBATCH --nodes=2\n"), std::string::npos) << s;
  EXPECT_NE(s.find("#SBATCH --ntasks-per-node=1\n"), std::string::npos) << s;
  EXPECT_NE(s.find("train --config " + config.string()), std::string::npos) << s;

  // Trains as written, on the 2 ranks (one thread each on this machine).
  r = run_command("cd '" + dir.string() + "' && " + std::string(AISCALE_BINARY) +
                  " launch -n 2 --threads-per-rank 1 -- train -c emitted/train.toml");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("trained 3 steps"), std::string::npos) << r.output;
  EXPECT_TRUE(fs::exists(dir / "runs")) << r.output;
  if (!HasFailure()) fs::remove_all(dir);
}

// A row that `aiscale train` cannot run is not emitted: the reason is named.
TEST(PlanEmit, RowsThatDoNotRunAreRefused) {
  const fs::path dir = temp_dir("plan-emit-refused");
  RunOutput r = run_command(std::string(AISCALE_BINARY) +
                            " plan --model gpt2-350m --tokens 1e9 --system lumi --include-unsupported --emit '" +
                            (dir / "e").string() + "'");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("does not run in `aiscale train`"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir / "e" / "train.toml"));
  fs::remove_all(dir);
}

}  // namespace
