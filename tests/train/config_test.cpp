#include <gtest/gtest.h>

#include "aiscale/core/config_origins.h"
#include "aiscale/core/error.h"
#include "aiscale/train/config.h"
#include "aiscale/train/model_options.h"
#include "aiscale/train/schedule.h"

using aiscale::Error;
using aiscale::train::parse_train_config;

namespace {
std::string error_of(const std::string& text, std::vector<std::string> overrides = {}) {
  try {
    parse_train_config(text, "test.toml", overrides);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(TrainConfig, DefaultsAndPreset) {
  auto c = parse_train_config("[model]\npreset = \"gpt-tiny\"\nn_layer = 3\n[train]\nseq_len = 32\n",
                              "t.toml", {});
  EXPECT_EQ(c.model.n_layer, 3);   // explicit key overrides the preset
  EXPECT_EQ(c.model.n_embd, 64);   // from the preset
  EXPECT_EQ(c.model_preset, "gpt-tiny");
}

TEST(TrainConfig, MisspelledKeyIsNamedWithSuggestion) {
  std::string e = error_of("[train]\nstpes = 10\n");
  EXPECT_NE(e.find("train.stpes"), std::string::npos) << e;
  EXPECT_NE(e.find("did you mean 'train.steps'"), std::string::npos) << e;
  EXPECT_NE(e.find("test.toml"), std::string::npos) << e;
}

TEST(TrainConfig, UnknownSection) {
  std::string e = error_of("[trian]\nsteps = 10\n");
  EXPECT_NE(e.find("trian.steps"), std::string::npos) << e;
}

TEST(TrainConfig, BadValuesNameKeyValueAndAllowed) {
  std::string e = error_of("[train]\ndevice = \"tpu\"\n");
  EXPECT_NE(e.find("train.device"), std::string::npos) << e;
  EXPECT_NE(e.find("tpu"), std::string::npos) << e;
  EXPECT_NE(e.find("cpu, cuda"), std::string::npos) << e;
  e = error_of("[train]\nsteps = \"ten\"\n");
  EXPECT_NE(e.find("must be an integer"), std::string::npos) << e;
  e = error_of("[train]\nbatch_size = 0\n");
  EXPECT_NE(e.find("at least 1"), std::string::npos) << e;
  e = error_of("[model]\nn_embd = 100\nn_head = 3\n");
  EXPECT_NE(e.find("not divisible"), std::string::npos) << e;
  e = error_of("[model]\npreset = \"gpt5\"\n");
  EXPECT_NE(e.find("gpt2-124m"), std::string::npos) << e;
}

TEST(TrainConfig, MalformedTomlGivesLineAndColumn) {
  std::string e = error_of("[train]\nsteps = = 3\n");
  EXPECT_NE(e.find("test.toml:2:"), std::string::npos) << e;
  EXPECT_NE(e.find("malformed TOML"), std::string::npos) << e;
}

TEST(TrainConfig, Overrides) {
  auto c = parse_train_config("", "t.toml", {"train.steps=7", "train.warmup_steps=2", "train.lr=1e-3", "data.train=x_*.bin",
                                             "train.recompute=true"});
  EXPECT_EQ(c.steps, 7);
  EXPECT_DOUBLE_EQ(c.lr, 1e-3);
  EXPECT_EQ(c.train_data, "x_*.bin");
  EXPECT_TRUE(c.recompute);
  EXPECT_NE(error_of("", {"steps=3"}).find("section"), std::string::npos);
  EXPECT_NE(error_of("", {"train.stepz=3"}).find("train.stepz"), std::string::npos);
  EXPECT_NE(error_of("[train]\nsteps = 5\nwarmup_steps = 9\n").find("warmup_steps"), std::string::npos);
  EXPECT_NE(error_of("[train]\nprecision = \"bf16\"\n").find("cuda"), std::string::npos);
}

// train.precision = "fp8": refused on the CPU naming the fix; on cuda the model options
// say bf16 activations with FP8 linear layers, with the delayed scaling's keys.
TEST(TrainConfig, Fp8Precision) {
  const std::string e = error_of("[train]\nprecision = \"fp8\"\n");
  EXPECT_NE(e.find("train.precision = \"fp8\" needs train.device = \"cuda\""), std::string::npos) << e;
  auto c = parse_train_config("[train]\ndevice = \"cuda\"\nprecision = \"fp8\"\nfp8_history = 64\n",
                              "t.toml", {"train.fp8_margin=2"});
  const aiscale::nn::GptRunOptions o = aiscale::train::gpt_run_options(c);
  EXPECT_TRUE(o.fp8);
  EXPECT_EQ(o.precision, aiscale::DType::bf16);
  EXPECT_EQ(o.fp8_history, 64);
  EXPECT_EQ(o.fp8_margin, 2);
  const aiscale::nn::GptRunOptions bf16 = aiscale::train::gpt_run_options(
      parse_train_config("[train]\ndevice = \"cuda\"\nprecision = \"bf16\"\n", "t.toml", {}));
  EXPECT_FALSE(bf16.fp8);
  EXPECT_EQ(parse_train_config(aiscale::train::to_toml(c), "config.toml", {}).fp8_history, 64);
  EXPECT_NE(error_of("[train]\ndevice = \"cuda\"\nfp8_history = 0\n").find("train.fp8_history"),
            std::string::npos);
}

// train.attention chooses the GPU attention kernels: the allowed values, the refusal on
// the CPU (naming the fix), and the key surviving the run's config.toml.
TEST(TrainConfig, AttentionKey) {
  EXPECT_EQ(parse_train_config("", "t.toml", {}).attention, "auto");
  auto c = parse_train_config("[train]\ndevice = \"cuda\"\nprecision = \"bf16\"\nattention = \"flash\"\n",
                              "t.toml", {});
  EXPECT_EQ(c.attention, "flash");
  EXPECT_EQ(parse_train_config(aiscale::train::to_toml(c), "config.toml", {}).attention, "flash");
  std::string e = error_of("[train]\nattention = \"cudnn\"\n");
  EXPECT_NE(e.find("train.attention = \"cudnn\""), std::string::npos) << e;
  EXPECT_NE(e.find("train.device = \"cuda\""), std::string::npos) << e;
  e = error_of("[train]\ndevice = \"cuda\"\nattention = \"xformers\"\n");
  EXPECT_NE(e.find("train.attention"), std::string::npos) << e;
  EXPECT_NE(e.find("auto, cudnn, flash, simple"), std::string::npos) << e;
}

TEST(TrainConfig, ResolvedTomlRoundTrips) {
  auto c = parse_train_config("[model]\npreset = \"gpt-tiny\"\n[train]\nsteps = 12\nlr = 0.002\nseq_len = 64\n",
                              "t.toml", {});
  auto again = parse_train_config(aiscale::train::to_toml(c), "resolved.toml", {});
  EXPECT_EQ(aiscale::train::to_toml(c), aiscale::train::to_toml(again));
  EXPECT_EQ(again.steps, 12);
}

TEST(Schedule, WarmupThenCosineToMin) {
  aiscale::train::TrainConfig c;
  c.lr = 1.0;
  c.min_lr_ratio = 0.1;
  c.warmup_steps = 10;
  c.steps = 110;
  EXPECT_DOUBLE_EQ(aiscale::train::learning_rate(c, 0), 0.1);
  EXPECT_DOUBLE_EQ(aiscale::train::learning_rate(c, 9), 1.0);
  EXPECT_DOUBLE_EQ(aiscale::train::learning_rate(c, 10), 1.0);
  EXPECT_NEAR(aiscale::train::learning_rate(c, 109), 0.1, 1e-12);
  EXPECT_NEAR(aiscale::train::learning_rate(c, 10 + 99 / 2.0), 0.55, 0.02);
}

// Non-finite numbers pass every `<` test: each is refused with its key named.
TEST(TrainConfig, NonFiniteNumbersAreRefused) {
  std::string e = error_of("[train]\nlr = nan\n");
  EXPECT_NE(e.find("train.lr"), std::string::npos) << e;
  EXPECT_NE(e.find("not a finite number"), std::string::npos) << e;
  e = error_of("[parallel]\ntimeout_s = inf\n");
  EXPECT_NE(e.find("parallel.timeout_s"), std::string::npos) << e;
  e = error_of("", {"train.grad_clip=nan"});
  EXPECT_NE(e.find("--set train.grad_clip=nan"), std::string::npos) << e;
  e = error_of("", {"train.beta1=-inf"});
  EXPECT_NE(e.find("train.beta1"), std::string::npos) << e;
}

// Counts that reach OpenMP, loop bounds or the allocator are bounded in the schema.
TEST(TrainConfig, AbsurdCountsAreRefusedWithTheirKey) {
  std::string e = error_of("[train]\nthreads = 100000\n");
  EXPECT_NE(e.find("train.threads"), std::string::npos) << e;
  EXPECT_NE(e.find("at most 1024"), std::string::npos) << e;
  e = error_of("[model]\npreset = \"gpt-tiny\"\nn_embd = 4000000\n");
  EXPECT_NE(e.find("model.n_embd"), std::string::npos) << e;
  e = error_of("[model]\npreset = \"gpt-tiny\"\nblock_size = 1048576\n[train]\nbatch_size = 1048576\n"
               "seq_len = 1048576\n");
  EXPECT_NE(e.find("train.batch_size x train.seq_len"), std::string::npos) << e;
  e = error_of("[train]\nsteps = 9223372036854775807\n");
  EXPECT_NE(e.find("train.steps"), std::string::npos) << e;
  EXPECT_NE(e.find("2^40"), std::string::npos) << e;
}

TEST(TrainConfig, DivergenceKeys) {
  auto c = parse_train_config("", "t.toml", {});
  EXPECT_EQ(c.divergence_factor, 5.0);
  EXPECT_EQ(c.divergence_window, 20);
  std::string e = error_of("[train]\ndivergence_factor = 0.5\n");
  EXPECT_NE(e.find("train.divergence_factor"), std::string::npos) << e;
  EXPECT_EQ(error_of("[train]\ndivergence_factor = 0\n"), "");
  EXPECT_EQ(c.divergence_climb_factor, 1.5);
  EXPECT_EQ(c.divergence_climb_window, 100);
  e = error_of("[train]\ndivergence_climb_factor = 1.0\n");
  EXPECT_NE(e.find("train.divergence_climb_factor"), std::string::npos) << e;
  EXPECT_NE(e.find("0 to turn the check off"), std::string::npos) << e;
  e = error_of("[train]\ndivergence_climb_window = 1\n");
  EXPECT_NE(e.find("train.divergence_climb_window"), std::string::npos) << e;
  EXPECT_EQ(error_of("[train]\ndivergence_climb_factor = 0\n"), "");
}

// An integer beyond 64 bits is out of range, with the key's range, in the file and in a --set.
TEST(TrainConfig, IntegerBeyondSixtyFourBitsIsOutOfRangeWithItsRange) {
  std::string e = error_of("[train]\nlr = 1e-3\nsteps = 99999999999999999999\n");
  EXPECT_NE(e.find("test.toml:3: train.steps = 99999999999999999999 is out of range: it must be a whole "
                   "number between 1 and 2^40"), std::string::npos) << e;
  e = error_of("", {"train.steps=99999999999999999999"});
  EXPECT_NE(e.find("--set train.steps=99999999999999999999: config key 'train.steps' = "
                   "99999999999999999999 is out of range: it must be a whole number between 1 and 2^40"),
            std::string::npos) << e;
  EXPECT_EQ(e.find("must be an integer"), std::string::npos) << e;
  e = error_of("", {"train.seed=-99999999999999999999"});
  EXPECT_NE(e.find("is out of range: it must be a whole number between 0 and 9223372036854775807"),
            std::string::npos) << e;
}

// An error names where the values it is about came from: the --set, the option an override
// was made from, or file:line; not the config file for a value it does not hold.
TEST(TrainConfig, ErrorsNameWhereTheValueCameFrom) {
  std::string e = error_of("[model]\npreset = \"gpt-tiny\"\n[train]\nseq_len = 32\n", {"train.precision=bf16"});
  EXPECT_EQ(e.rfind("--set train.precision=bf16: train.precision = \"bf16\" needs", 0), 0u) << e;
  e = error_of("[model]\npreset = \"gpt-tiny\"\n[train]\nseq_len = 32\n", {"train.steps=0"});
  EXPECT_EQ(e.rfind("--set train.steps=0: config key 'train.steps' = 0 is too small", 0), 0u) << e;
  e = error_of("[model]\npreset = \"gpt-tiny\"\n[train]\nsteps = 0\n");
  EXPECT_EQ(e.rfind("test.toml:4: config key 'train.steps' = 0 is too small", 0), 0u) << e;
  // Two keys: each named with its origin, in the order the message names them.
  e = error_of("[model]\npreset = \"gpt-tiny\"\n[train]\nseq_len = 32\nsteps = 50\n", {"train.warmup_steps=80"});
  EXPECT_EQ(e.rfind("--set train.warmup_steps=80, test.toml:5: train.warmup_steps = 80 exceeds train.steps = 50", 0), 0u) << e;
  // A model size from the preset names the preset's line.
  e = error_of("[model]\npreset = \"gpt-tiny\"\n", {"train.seq_len=4096"});
  EXPECT_EQ(e.rfind("--set train.seq_len=4096, test.toml:2 (model.preset): train.seq_len = 4096 exceeds "
                    "model.block_size = 64", 0), 0u) << e;
  // An override made from an option names the option.
  aiscale::config::name_override_origin("train.seq_len=2048", "--seq-len 2048");
  e = error_of("[model]\npreset = \"gpt-tiny\"\n", {"train.seq_len=2048"});
  EXPECT_EQ(e.rfind("--seq-len 2048, test.toml:2 (model.preset): train.seq_len = 2048 exceeds", 0), 0u) << e;
  // A key at its default has no origin: the message names the others'.
  e = error_of("[model]\npreset = \"gpt-tiny\"\n");
  EXPECT_EQ(e.rfind("test.toml:2 (model.preset): train.seq_len = 128 exceeds model.block_size = 64", 0), 0u) << e;
}
