// The quick-start model (configs/quickstart.toml) on Debian's fortunes tokenized into a test's
// folder, and a search over its learning rate and warm-up (aiscale tune with
// study.backend = "train"), for the tests that run such a search here and through Slurm.
// Needs AISCALE_SOURCE_DIR and AISCALE_BINARY.
#pragma once
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "run_support.h"

namespace aiscale::testsupport {

// configs/quickstart.toml, written to DIR/quickstart.toml with its data read from the fortunes
// tokenized (GPT-2 BPE, as scripts/quickstart.sh does) under DIR.
inline std::string quickstart_in(const fs::path& dir) {
  auto r = run_aiscale("data tokenize --input /usr/share/games/fortunes --output-prefix " +
                       (dir / "fortunes").string() + " --fortune");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::string text = read_bytes(fs::path(AISCALE_SOURCE_DIR) / "configs/quickstart.toml");
  auto swap = [&](const std::string& from, const std::string& to) {
    const size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) text.replace(at, from.size(), to);
  };
  swap("data/fortunes/fortunes_train_*.bin", (dir / "fortunes").string() + "_train_*.bin");
  swap("data/fortunes/fortunes_val_*.bin", (dir / "fortunes").string() + "_val_*.bin");
  std::ofstream(dir / "quickstart.toml") << text;
  return (dir / "quickstart.toml").string();
}

// 12 trials of 60 steps over train.lr (log-uniform 3e-4..3e-2) and train.warmup_steps
// (0..30), two at a time of one rank each, ASHA with eta 3 from step 10. The default
// configuration is the quick-start model with the engine's default learning rate
// (train.lr = 6e-4, not the quick start's tuned 3e-3), so that the search has something to
// find. Returns the study file; the study directory is DIR/out.
inline std::string quickstart_lr_study(const fs::path& dir) {
  quickstart_in(dir);
  std::ofstream(dir / "study.toml")
      << "[study]\nname = \"qs\"\nbackend = \"train\"\ntrials = 12\nseed = 1\ndir = \"" << (dir / "out").string()
      << "\"\n[train]\nconfig = \"quickstart.toml\"\nset = [\"train.lr=6e-4\", \"train.eval_batches=4\"]\n"
      << "parallel_trials = 2\nranks_per_trial = 1\n[fixed]\n\"train.steps\" = 60\n"
      << "[halving]\neta = 3\nmin_budget = 10\n"
      << "[params.\"train.lr\"]\ntype = \"log-uniform\"\nlow = 3e-4\nhigh = 3e-2\n"
      << "[params.train.warmup_steps]\ntype = \"int\"\nlow = 0\nhigh = 30\n";
  return (dir / "study.toml").string();
}

}  // namespace aiscale::testsupport
