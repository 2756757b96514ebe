// `aiscale train --init-from DIR` (train.init_from) through the binary on a tiny model:
// a Hugging Face model folder written here starts the run, which continues and resumes
// like any other; a folder that does not fit is refused naming the tensor or field.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "aiscale/core/fs.h"
#include "aiscale/nn/models/gpt.h"
#include "aiscale/train/checkpoint.h"
#include "aiscale/train/hf_checkpoint.h"
#include "aiscale/train/hf_config.h"
#include "aiscale/train/hf_mapping.h"
#include "aiscale/train/safetensors.h"
#include "../support/run_support.h"

using namespace aiscale;
using namespace aiscale::testsupport;

namespace {

std::vector<double> losses(const fs::path& run) {
  std::vector<double> out;
  for (const auto& m : read_metrics(run)) out.push_back(m.at("loss").get<double>());
  return out;
}

// tiny_config's model: gpt-tiny with block_size 32.
nn::GptConfig tiny_model() {
  nn::GptConfig c = nn::gpt_preset("gpt-tiny");
  c.block_size = 32;
  return c;
}

void write_folder(const fs::path& dir, const std::vector<std::pair<std::string, std::string>>& files) {
  fs::create_directories(dir);
  for (const auto& [name, bytes] : files) atomic_write_file((dir / name).string(), bytes);
}

class InitFrom : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = temp_dir("init-from");
    write_byte_shards(dir_);
    config_ = tiny_config(dir_);
    // The weights a run of seed 7 starts from, as a model folder: once in one file, once
    // in shards of at most 20 KB with an index.
    const nn::GptConfig c = tiny_model();
    write_folder(dir_ / "seed7", train::hf_model_files(c, nn::gpt_init_params(c, 7)));
    write_folder(dir_ / "seed7-sharded",
                 train::hf_model_files(c, nn::gpt_init_params(c, 7), 20'000));
    // Fresh runs of seeds 7 and 1337, and seed 1337's data order from seed 7's weights.
    for (const std::string& sets : std::vector<std::string>{"--set run.name=seed7-fresh train.seed=7", "--set run.name=fresh",
                                   "--init-from " + (dir_ / "seed7").string() + " --set run.name=from7"}) {
      auto r = train(sets);
      ASSERT_EQ(r.exit_code, 0) << r.output;
    }
  }
  static RunOutput train(const std::string& args, const std::string& env = "") {
    return run_aiscale("train -q -c " + config_ + " --set train.steps=10 train.eval_batches=1 " + args, env);
  }
  static fs::path dir_;
  static std::string config_;
};
fs::path InitFrom::dir_;
std::string InitFrom::config_;

TEST_F(InitFrom, WeightsOfTheFolderStartTheRun) {
  // The folder holds exactly what seed 7 initialises: a run of seed 7 from it is the run
  // of seed 7 (the seed also orders the data), to the bit.
  auto r = train("--init-from " + (dir_ / "seed7").string() + " --set run.name=from7-seed7 train.seed=7");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(losses(dir_ / "runs/seed7-fresh"), losses(dir_ / "runs/from7-seed7"));
  EXPECT_TRUE(read_bytes(dir_ / "runs/seed7-fresh/checkpoints/step_00000010/model.safetensors") ==
              read_bytes(dir_ / "runs/from7-seed7/checkpoints/step_00000010/model.safetensors"));
  // Seed 1337's data order from seed 7's weights: not the seed-1337 run.
  EXPECT_GT(std::abs(losses(dir_ / "runs/fresh")[0] - losses(dir_ / "runs/from7")[0]), 1e-3);
  // The key is recorded with the run.
  EXPECT_NE(read_bytes(dir_ / "runs/from7/config.toml").find("init_from = '" + (dir_ / "seed7").string() + "'"),
            std::string::npos);
}

TEST_F(InitFrom, ShardedFolderLoadsLikeOneFile) {
  ASSERT_TRUE(fs::exists(dir_ / "seed7-sharded" / "model.safetensors.index.json"));
  auto r = train("--set run.name=from7s train.init_from=" + (dir_ / "seed7-sharded").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(losses(dir_ / "runs/from7"), losses(dir_ / "runs/from7s"));
}

TEST_F(InitFrom, RunResumesFromItsOwnCheckpoint) {
  // Stopped after step 5 and resumed: the same as the run that never stopped; the
  // resumed run continues from its checkpoint, not from the folder again. Its checkpoints
  // are written in shards of at most 50 KB (run.max_shard_gb), and resume from those.
  auto r = train("--init-from " + (dir_ / "seed7").string() +
                     " --set run.name=stop7 run.max_shard_gb=0.00005",
                 "AISCALE_FAULT=term@5");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_TRUE(fs::exists(dir_ / "runs/stop7/checkpoints/step_00000005/COMPLETE"));
  EXPECT_TRUE(fs::exists(dir_ / "runs/stop7/checkpoints/step_00000005/model.safetensors.index.json"));
  EXPECT_FALSE(fs::exists(dir_ / "runs/stop7/checkpoints/step_00000005/model.safetensors"));
  r = run_aiscale("train --resume " + (dir_ / "runs/stop7").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("resume note: train.init_from = \"" + (dir_ / "seed7").string() +
                          "\" is not read: the run continues from its checkpoint of step 5"),
            std::string::npos) << r.output;
  EXPECT_EQ(losses(dir_ / "runs/from7"), losses(dir_ / "runs/stop7"));
}

TEST_F(InitFrom, RunCheckpointIsAModelFolderRoundTrip) {
  // A checkpoint folder of one run starts another: its weights, bit for bit (a run of lr 0
  // never changes them, so its own checkpoint must equal the folder it started from).
  const fs::path ckpt = dir_ / "runs/seed7-fresh/checkpoints/step_00000010";
  auto r = train("--init-from " + ckpt.string() +
                 " --set run.name=lr0 train.lr=0 train.steps=1 train.warmup_steps=0 train.weight_decay=0");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(read_bytes(ckpt / "model.safetensors") ==
              read_bytes(dir_ / "runs/lr0/checkpoints/step_00000001/model.safetensors"));
}

TEST_F(InitFrom, MismatchedFoldersAreRefusedNamingWhat) {
  const nn::GptConfig c = tiny_model();
  const std::vector<float> params = nn::gpt_init_params(c, 7);
  // config.json of another width.
  nn::GptConfig wide = c;
  wide.n_embd = 128;
  write_folder(dir_ / "wide", {{"config.json", train::hf_config_json(wide)},
                               {"model.safetensors", "x"}});
  auto r = train("--init-from " + (dir_ / "wide").string() + " --set run.name=wide");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("n_embd = 128, the model's model.n_embd = 64; set the model to the "
                          "checkpoint's: --set model.n_embd=128"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "runs/wide"));
  // A GPT-2 folder for a Llama-family model.
  r = train("--init-from " + (dir_ / "seed7").string() + " --set model.preset=llama-tiny run.name=llama");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("seed7/config.json' describes a gpt2 model (model_type \"gpt2\"); this run "
                          "trains the llama family"), std::string::npos) << r.output;
  // A tensor missing, one unexpected, one of another shape: all three in one message.
  auto tensors = train::hf_export(train::gpt2_hf_map(c), params.data());
  std::vector<train::SafeTensor> edited;
  for (auto t : tensors) {
    if (t.name == "h.0.attn.c_proj.bias") continue;
    if (t.name == "h.1.attn.c_attn.weight") t.shape = {192, 64};
    edited.push_back(t);
  }
  edited.push_back({"score.weight", {2, 64}, std::vector<float>(128), "F32"});
  write_folder(dir_ / "edited", {{"config.json", train::hf_config_json(c)},
                                 {"model.safetensors", train::safetensors_serialize(edited)}});
  r = train("--init-from " + (dir_ / "edited").string() + " --set run.name=edited");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("1 missing tensor: h.0.attn.c_proj.bias"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("1 unexpected tensor: score.weight"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("h.1.attn.c_attn.weight is [192, 64] in the checkpoint, the model's is [64, 192]"),
            std::string::npos) << r.output;
  // A truncated weights file.
  fs::copy(dir_ / "seed7", dir_ / "cut", fs::copy_options::recursive);
  fs::resize_file(dir_ / "cut/model.safetensors", fs::file_size(dir_ / "cut/model.safetensors") - 100);
  r = train("--init-from " + (dir_ / "cut").string() + " --set run.name=cut");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find((dir_ / "cut/model.safetensors").string() + "' is truncated or corrupt: "
                          "tensor 'ln_f.bias' lies outside the file"), std::string::npos) << r.output;
}

// The end to end: a model trained by aiscale on the fortunes, exported as its checkpoint
// folder, then fine-tuned by a new run with --init-from. The new run's first loss is where
// the trained model left off, far below a fresh initialisation's.
TEST(InitFromFortunes, FineTuningContinuesFromTheExportedModel) {
  const fs::path fortunes = "/usr/share/games/fortunes";
  if (!fs::exists(fortunes)) GTEST_SKIP() << "no " << fortunes << " (Debian package fortunes)";
  const fs::path d = temp_dir("init-from-fortunes");
  auto r = run_aiscale("data tokenize --input " + fortunes.string() + " --output-prefix " +
                       (d / "f").string() + " --fortune --tokenizer byte");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string base = "train -q -c " + tiny_config(d) + " --set data.train=" + (d / "f_train_*.bin").string() +
                           " data.val=" + (d / "f_val_*.bin").string() + " train.eval_batches=1 ";
  r = run_aiscale(base + "--set run.name=pretrained train.steps=150 train.batch_size=8");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::vector<double> pre = losses(d / "runs/pretrained");
  const fs::path exported = d / "runs/pretrained/checkpoints/step_00000150";
  ASSERT_TRUE(fs::exists(exported / "config.json"));
  r = run_aiscale(base + "--init-from " + exported.string() +
                  " --set run.name=finetuned train.steps=10 train.seed=99 train.lr=3e-4");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_aiscale(base + "--set run.name=fresh train.steps=10 train.seed=99 train.lr=3e-4");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::vector<double> fine = losses(d / "runs/finetuned"), fresh = losses(d / "runs/fresh");
  // The trained model's last losses (the mean of its last 10 steps) against the new run's
  // first: within a batch's spread; a fresh model starts near ln(256) = 5.5.
  double tail = 0;
  for (size_t i = pre.size() - 10; i < pre.size(); ++i) tail += pre[i] / 10;
  EXPECT_LT(tail, pre.front() - 1.0);
  EXPECT_NEAR(fine.front(), tail, 0.35) << "trained to " << tail << ", fine-tuning starts at " << fine.front();
  EXPECT_GT(fresh.front(), fine.front() + 1.0);
  std::printf("trained: %.4f -> %.4f (last 10 steps %.4f); fine-tuned from it: %.4f -> %.4f; fresh: "
              "%.4f -> %.4f\n", pre.front(), pre.back(), tail, fine.front(), fine.back(),
              fresh.front(), fresh.back());
}

}  // namespace
