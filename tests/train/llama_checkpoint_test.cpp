// Checkpoints of the llama family (llama-tiny on the CPU): config.json is a Hugging Face
// LlamaConfig that rebuilds the same family and shape, a stopped run resumes bit for bit,
// and a checkpoint of one family is refused for a model of the other.
#include <gtest/gtest.h>

#include "aiscale/core/error.h"
#include "aiscale/train/checkpoint.h"
#include "aiscale/train/checkpoint_check.h"
#include "../support/run_support.h"

using namespace aiscale;
using namespace aiscale::testsupport;

namespace {

std::string llama_config(const fs::path& dir) {
  std::string cfg = "[model]\npreset = \"llama-tiny\"\nblock_size = 32\nrope_scaling_factor = 8.0\n"
                    "rope_original_context = 16\n"
                    "[data]\ntrain = \"" + (dir / "tiny_train_*.bin").string() + "\"\n"
                    "val = \"" + (dir / "tiny_val_*.bin").string() + "\"\ntokenizer = \"byte\"\n"
                    "[train]\nbatch_size = 4\nseq_len = 32\nsteps = 16\nwarmup_steps = 2\nlr = 3e-3\n"
                    "threads = 1\neval_batches = 1\n"
                    "[run]\ndir = \"" + (dir / "runs").string() + "\"\n";
  std::ofstream(dir / "llama.toml") << cfg;
  return (dir / "llama.toml").string();
}

TEST(LlamaCheckpoint, ResumesBitForBitAndKeepsTheFamily) {
  const fs::path dir = temp_dir("llama-checkpoint");
  write_byte_shards(dir);
  const std::string config = llama_config(dir);
  auto r = run_aiscale("train -q -c " + config + " --set run.name=straight");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_aiscale("train -q -c " + config + " --set run.name=stopped", "AISCALE_FAULT=term@8");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const fs::path ckpt = dir / "runs/stopped/checkpoints" / train::checkpoint_name(8);
  const nn::GptConfig found = train::read_checkpoint_model(ckpt.string());
  EXPECT_TRUE(found.llama());
  EXPECT_EQ(found.kv_heads(), 2);
  EXPECT_EQ(found.ffn(), 176);
  EXPECT_FALSE(found.tie_embeddings);
  EXPECT_EQ(found.rope_scaling.factor, 8.0);
  EXPECT_EQ(found.rope_scaling.original_context, 16);
  const auto hf = nlohmann::json::parse(read_bytes(ckpt / "config.json"));
  EXPECT_EQ(hf["model_type"], "llama");
  EXPECT_EQ(hf["rope_scaling"]["rope_type"], "llama3");

  r = run_aiscale("train -q --resume " + (dir / "runs/stopped").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto a = read_metrics(dir / "runs/straight"), b = read_metrics(dir / "runs/stopped");
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_EQ(double(a[i]["loss"]), double(b[i]["loss"])) << "step " << i + 1;
  const auto weights = [&](const char* run) {
    return read_bytes(dir / "runs" / run / "checkpoints" / train::checkpoint_name(16) /
                      "model.safetensors");
  };
  EXPECT_EQ(weights("straight"), weights("stopped"));

  // The same dimensions in the other family: refused, naming the family.
  nn::GptConfig gpt2 = found;
  gpt2.family = nn::GptFamily::gpt2;
  gpt2.n_kv_head = 0;
  gpt2.ffn_hidden = 0;
  gpt2.tie_embeddings = true;
  gpt2.rope_scaling = {};
  try {
    train::check_checkpoint_model(found, gpt2, ckpt.string());
    FAIL() << "a llama checkpoint was accepted for a gpt2 model";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("family=llama"), std::string::npos) << e.what();
  }
  // And a llama of another rotary scaling.
  nn::GptConfig other = found;
  other.rope_scaling.original_context = 32;
  EXPECT_THROW(train::check_checkpoint_model(found, other, ckpt.string()), Error);
}

}  // namespace
