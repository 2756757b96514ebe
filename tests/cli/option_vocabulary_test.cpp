// One option vocabulary for train, bench language and plan (cli/run_options.h): the same
// name for the same setting, the config key's name, mapped once through the train
// config's schema; the older spellings still work as aliases.
#include <algorithm>
#include <sstream>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "aiscale/cli/run_options.h"
#include "aiscale/train/config.h"
#include "../support/run_support.h"

namespace aiscale {
namespace {

using namespace testsupport;

std::vector<std::string> parsed(std::vector<std::string> args) {
  CLI::App app("test");
  cli::RunOptions o;
  cli::add_run_options(&app, o, cli::run_option_keys(), "Run");
  std::reverse(args.begin(), args.end());  // CLI11 takes the arguments last first
  app.parse(args);
  return o.overrides();
}

TEST(OptionVocabulary, EveryOptionIsAConfigKeyUnderItsOwnName) {
  for (const std::string& key : cli::run_option_keys()) {
    SCOPED_TRACE(key);
    ASSERT_TRUE(train::config_key_info(key).has_value());
    std::string name = key == "model.preset" ? "model" : key.substr(key.find('.') + 1);
    std::replace(name.begin(), name.end(), '_', '-');
    EXPECT_EQ(cli::run_option_names(key).rfind("--" + name, 0), 0u) << cli::run_option_names(key);
  }
}

TEST(OptionVocabulary, OptionsAndAliasesBecomeConfigOverrides) {
  // In the order of the definitions (model.preset first, so a preset never undoes a size).
  EXPECT_EQ(parsed({"--n-layer", "3", "--batch-size", "4", "--seq-len", "16", "--zero-stage", "1",
                    "--overlap", "0", "--recompute", "--device", "cuda", "--model", "gpt-tiny"}),
            (std::vector<std::string>{"model.preset=gpt-tiny", "model.n_layer=3",
                                      "train.batch_size=4", "train.seq_len=16", "train.device=cuda",
                                      "train.recompute=true", "parallel.zero_stage=1",
                                      "parallel.overlap=false"}));
  EXPECT_EQ(parsed({"--layers", "3", "-b", "4", "--seq", "16", "--zero", "1", "--width", "32"}),
            (std::vector<std::string>{"model.n_layer=3", "model.n_embd=32", "train.batch_size=4",
                                      "train.seq_len=16", "parallel.zero_stage=1"}));
  EXPECT_EQ(parsed({"--micro-batch", "2", "-t", "8"}),
            (std::vector<std::string>{"train.batch_size=2", "train.seq_len=8"}));
  // The llama family's shape keys (bench language's untied 1B shape: --tie-embeddings false).
  EXPECT_EQ(parsed({"--tie-embeddings", "false", "--model", "llama3-1b-shape", "--n-kv-head", "4",
                    "--ffn-hidden", "512"}),
            (std::vector<std::string>{"model.preset=llama3-1b-shape", "model.n_kv_head=4",
                                      "model.ffn_hidden=512", "model.tie_embeddings=false"}));
  // Ranges and choices are the schema's.
  EXPECT_THROW(parsed({"--n-layer", "0"}), CLI::ValidationError);
  EXPECT_THROW(parsed({"--device", "tpu"}), CLI::ValidationError);
  EXPECT_THROW(parsed({"--n-embd", "nan"}), CLI::ValidationError);
}

TEST(OptionVocabulary, HelpOfEachCommandUsesTheSameNames) {
  for (const char* cmd : {"train --help", "bench language --help", "plan --help"}) {
    const auto r = run_aiscale(cmd);
    ASSERT_EQ(r.exit_code, 0) << cmd << r.output;
    for (const char* name : {"--n-layer", "--n-head", "--n-embd", "--seq-len", "--batch-size",
                             "--zero-stage", "--grad-transport"})
      EXPECT_NE(r.output.find(name), std::string::npos) << cmd << " lacks " << name;
  }
}

TEST(OptionVocabulary, BenchTakesTheNewNamesAndTheOldOnes) {
  for (const char* args : {"--n-layer 1 --n-embd 32 --batch-size 2 --seq-len 16",
                           "--layers 1 --width 32 --batch 2 --seq 16"}) {
    const auto r = run_aiscale(std::string("bench language --model gpt-tiny --steps 1 --warmup 0 "
                                           "--threads 1 ") + args);
    ASSERT_EQ(r.exit_code, 0) << args << r.output;
    nlohmann::json j;
    std::istringstream lines(r.output);
    for (std::string line; std::getline(lines, line);)
      if (!line.empty() && line.front() == '{') j = nlohmann::json::parse(line);
    EXPECT_EQ(j["n_layer"], 1) << args;
    EXPECT_EQ(j["n_embd"], 32) << args;
    EXPECT_EQ(j["batch"], 2) << args;
    EXPECT_EQ(j["seq"], 16) << args;
  }
  // A rule of the schema is reported with the option that breaks it.
  const auto r = run_aiscale("bench language --model gpt-tiny --seq-len 100");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("train.seq_len is --seq-len"), std::string::npos) << r.output;
}

TEST(OptionVocabulary, TrainOptionsSetTheirKeysBeforeSet) {
  const std::string config = std::string(AISCALE_TEST_DATA_DIR) + "/../configs/quickstart.toml";
  // quickstart's block_size is 64: --seq-len 100 must reach train.seq_len and be refused.
  auto r = run_aiscale("train --config " + config + " --seq-len 100");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("train.seq_len = 100 exceeds model.block_size = 64"), std::string::npos)
      << r.output;
  // --set comes after the options, so it wins.
  r = run_aiscale("train --config " + config + " --seq-len 100 --set model.block_size=32");
  EXPECT_NE(r.output.find("train.seq_len = 100 exceeds model.block_size = 32"), std::string::npos)
      << r.output;
}

TEST(OptionVocabulary, PlanTakesTheNewNamesAndTheOldOnes) {
  const std::string base = "plan --model gpt2-124m --tokens 1e9 --system leonardo --gpus 4 --json ";
  const auto a = run_aiscale(base + "--zero-stage 1 --batch-size 8 --seq-len 512");
  const auto b = run_aiscale(base + "--zero 1 --micro-batch 8 --seq 512");
  ASSERT_EQ(a.exit_code, 0) << a.output;
  ASSERT_EQ(b.exit_code, 0) << b.output;
  EXPECT_EQ(a.output, b.output);
}

}  // namespace
}  // namespace aiscale
