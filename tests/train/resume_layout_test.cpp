// A run resumed in another layout or batch: the keys of the old layout reset with notes,
// the notes on what changes, the data position of older checkpoints converted to samples,
// and paths given where a checkpoint or a run directory is wanted named for what they are.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "aiscale/core/error.h"
#include "aiscale/train/checkpoint.h"
#include "aiscale/train/checkpoint_check.h"
#include "aiscale/train/config.h"
#include "aiscale/train/resume_layout.h"
#include "../support/error_of.h"
#include "../support/run_support.h"

using namespace aiscale;
using namespace aiscale::train;
using aiscale::testsupport::error_of;
namespace fs = std::filesystem;

namespace {

// A run's stored config: gpt-tiny, batch 8 in 4 micro-batches over 2 pipeline stages.
const char* kStored =
    "[model]\npreset = \"gpt-tiny\"\n[train]\nseq_len = 32\nbatch_size = 8\n"
    "[parallel]\npipeline_parallel = 2\nmicrobatches = 4\n";

// The stored config with `overrides`, as a resumed run of `world` ranks loads it.
TrainConfig resumed(const std::string& stored, const std::vector<std::string>& overrides,
                    int world, std::vector<std::string>* notes) {
  return parse_train_config(stored, "config.toml", overrides,
                            [&](TrainConfig& c, const std::vector<std::string>& keys) {
                              *notes = reset_old_layout_keys(c, world, keys);
                            });
}

bool has(const std::vector<std::string>& notes, const std::string& part) {
  for (const auto& n : notes)
    if (n.find(part) != std::string::npos) return true;
  return false;
}

}  // namespace

TEST(ResumeLayoutKeys, MicrobatchesResetWhenThePipelineGoes) {
  std::vector<std::string> notes;
  const TrainConfig c = resumed(kStored, {"parallel.pipeline_parallel=1"}, 2, &notes);
  EXPECT_EQ(c.microbatches, 1);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("parallel.microbatches = 4 -> 1"), std::string::npos) << notes[0];
  EXPECT_NE(notes[0].find("pipeline_parallel = 1"), std::string::npos) << notes[0];
  // Set on the command line, the same contradiction is refused, as for a new run.
  const std::string e = error_of([&] {
    resumed(kStored, {"parallel.pipeline_parallel=1", "parallel.microbatches=4"}, 2, &notes);
  });
  EXPECT_NE(e.find("parallel.microbatches = 4"), std::string::npos) << e;
  // Without the adjustment (a new run) the stored keys are refused too.
  EXPECT_NE(error_of([&] { parse_train_config(kStored, "c.toml", {"parallel.pipeline_parallel=1"}); }),
            "");
}

TEST(ResumeLayoutKeys, MicrobatchesRaisedForMoreStagesAndAnotherBatch) {
  std::vector<std::string> notes;
  // 1f1b on 2 stages from a run without a pipeline: at least one micro-batch per stage.
  TrainConfig c = resumed("[model]\npreset = \"gpt-tiny\"\n[train]\nseq_len = 32\nbatch_size = 6\n",
                          {"parallel.pipeline_parallel=2"}, 2, &notes);
  EXPECT_EQ(c.microbatches, 2);
  EXPECT_TRUE(has(notes, "parallel.microbatches = 1 -> 2")) << notes.size();
  // Another batch that 4 does not divide: the smallest count >= 2 that divides 6.
  c = resumed(kStored, {"train.batch_size=6"}, 2, &notes);
  EXPECT_EQ(c.microbatches, 2);
  EXPECT_TRUE(has(notes, "parallel.microbatches = 4 -> 2"));
}

TEST(ResumeLayoutKeys, SequenceParallelZeroAndExchangesOfTheOldLayout) {
  std::vector<std::string> notes;
  const std::string tp2 = "[model]\npreset = \"gpt-tiny\"\n[train]\nseq_len = 32\nbatch_size = 4\n"
                          "[parallel]\ntensor_parallel = 2\nsequence_parallel = true\n";
  TrainConfig c = resumed(tp2, {"parallel.tensor_parallel=1"}, 2, &notes);
  EXPECT_FALSE(c.sequence_parallel);
  EXPECT_TRUE(has(notes, "parallel.sequence_parallel = true -> false"));
  // ZeRO-3 into pipeline stages: ZeRO-2 on CPU ranks.
  c = resumed("[model]\npreset = \"gpt-tiny\"\n[train]\nseq_len = 32\nbatch_size = 4\n"
              "[parallel]\nzero_stage = 3\n",
              {"parallel.pipeline_parallel=2", "parallel.microbatches=2"}, 2, &notes);
  EXPECT_EQ(c.zero_stage, 2);
  EXPECT_TRUE(has(notes, "parallel.zero_stage = 3 -> 2"));
  // ZeRO-1 stays on plain CPU data parallelism; with tensor parallelism it becomes ZeRO-2.
  c = resumed("[model]\npreset = \"gpt-tiny\"\n[train]\nseq_len = 32\nbatch_size = 4\n"
              "[parallel]\nzero_stage = 1\n", {}, 2, &notes);
  EXPECT_EQ(c.zero_stage, 1);
  EXPECT_FALSE(has(notes, "parallel.zero_stage"));
  c = resumed("[model]\npreset = \"gpt-tiny\"\n[train]\nseq_len = 32\nbatch_size = 4\n"
              "[parallel]\nzero_stage = 1\n", {"parallel.tensor_parallel=2"}, 2, &notes);
  EXPECT_EQ(c.zero_stage, 2);
  EXPECT_TRUE(has(notes, "parallel.zero_stage = 1 -> 2"));
  // Compression and AdaSum of CPU data parallelism into tensor parallelism.
  c = resumed("[model]\npreset = \"gpt-tiny\"\n[train]\nseq_len = 32\nbatch_size = 4\n"
              "[parallel]\ncompression = \"topk\"\n", {"parallel.tensor_parallel=2"}, 2, &notes);
  EXPECT_EQ(c.compression, "none");
  EXPECT_TRUE(has(notes, "parallel.compression = \"topk\" -> \"none\""));
  c = resumed("[model]\npreset = \"gpt-tiny\"\n[train]\nseq_len = 32\nbatch_size = 4\n"
              "[parallel]\ngrad_mixing = \"adasum\"\n", {}, 3, &notes);
  EXPECT_EQ(c.grad_mixing, "average");
  EXPECT_TRUE(has(notes, "dp 3 x tp 1 x pp 1"));
  // Nothing to reset: no notes.
  c = resumed("[model]\npreset = \"gpt-tiny\"\n[train]\nseq_len = 32\nbatch_size = 4\n"
              "[parallel]\ngrad_mixing = \"adasum\"\n", {}, 4, &notes);
  EXPECT_EQ(c.grad_mixing, "adasum");
  EXPECT_TRUE(notes.empty());
}

namespace {

CheckpointState written_by(int dp, int64_t batch, int64_t accum, int64_t tp = 1) {
  TrainConfig c = parse_train_config("[model]\npreset = \"gpt-tiny\"\n[train]\nseq_len = 32\n", "c", {});
  c.batch_size = batch;
  c.grad_accum = accum;
  c.tensor_parallel = tp;
  CheckpointState s;
  set_checkpoint_layout(s, c, dp);
  s.seed = c.seed;
  s.data = {0, 96};
  return s;
}

}  // namespace

TEST(ResumeNotes, TokensPerStepLayoutSeedAndSequenceLength) {
  TrainConfig c = parse_train_config("[model]\npreset = \"gpt-tiny\"\n[train]\nseq_len = 32\nbatch_size = 4\n",
                                     "c", {});
  // The same layout and batch: nothing to say.
  EXPECT_TRUE(resume_notes(written_by(2, 4, 1), c, {2, 1, 1}, "ck").empty());
  // dp 2 x 4 rows -> 1 rank x 4 rows: the tokens per step halve; the data goes on at sample 96.
  auto notes = resume_notes(written_by(2, 4, 1), c, {1, 1, 1}, "ck");
  EXPECT_TRUE(has(notes, "tokens per step change from 256")) << notes.at(0);
  EXPECT_TRUE(has(notes, "to 128"));
  EXPECT_TRUE(has(notes, "from sample 96 of epoch 0"));
  EXPECT_TRUE(has(notes, "written by dp 2 x tp 1 x pp 1, ZeRO-0, this run is dp 1 x tp 1 x pp 1"));
  // The same global batch in another layout (tp 2 -> dp 2 x 4 rows): a layout note only.
  notes = resume_notes(written_by(1, 8, 1, 2), c, {2, 1, 1}, "ck");
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_TRUE(has(notes, "dp 1 x tp 2"));
  // Accumulation in place of ranks: the same tokens per step.
  c.grad_accum = 2;
  EXPECT_FALSE(has(resume_notes(written_by(2, 4, 1), c, {1, 1, 1}, "ck"), "tokens per step"));
  c.grad_accum = 1;
  CheckpointState other_seed = written_by(2, 4, 1);
  other_seed.seed = 7;
  EXPECT_TRUE(has(resume_notes(other_seed, c, {2, 1, 1}, "ck"), "train.seed changes from 7"));
  // Another sequence length makes other samples: refused, naming the fix.
  c.seq_len = 16;
  const std::string e = error_of([&] { resume_notes(written_by(2, 4, 1), c, {2, 1, 1}, "ck"); });
  EXPECT_NE(e.find("train.seq_len = 32, this run has 16"), std::string::npos) << e;
  EXPECT_NE(e.find("--set train.seq_len=32"), std::string::npos) << e;
}

namespace {

// state.json as aiscale wrote it before the position counted samples.
nlohmann::json legacy_state(int64_t index, int world, const std::string& config_toml) {
  return {{"step", 12},           {"data_epoch", 1},      {"data_index", index},
          {"seed", 1337},         {"world_size", world},  {"nonfinite_steps", 0},
          {"n_params", nn::gpt_preset("gpt-tiny").num_params()},
          {"config_toml", config_toml}};
}

}  // namespace

// The position of an older checkpoint counted global batches of world x batch_size windows:
// converted exactly, with the layout and batch read from the config it carries.
TEST(ResumePosition, OlderCheckpointsConvertFromGlobalBatches) {
  CheckpointState s;
  s.model = nn::gpt_preset("gpt-tiny");
  const std::string toml = to_toml(parse_train_config(
      "[model]\npreset = \"gpt-tiny\"\n[train]\nseq_len = 32\nbatch_size = 4\ngrad_accum = 3\n"
      "[parallel]\ntensor_parallel = 2\n", "c", {}));
  checkpoint_state_from_json(legacy_state(5, 2, toml), s, "state.json");
  EXPECT_EQ(s.data, (DataPosition{1, 5 * 2 * 4}));
  EXPECT_TRUE(s.position_converted);
  EXPECT_EQ(s.batch_size, 4);
  EXPECT_EQ(s.grad_accum, 3);
  EXPECT_EQ(s.seq_len, 32);
  EXPECT_EQ(s.tensor_parallel, 2);
  EXPECT_EQ(tokens_per_step(s), 2 * 4 * 3 * 32);
  // Without a readable batch size only the start of an epoch converts.
  const std::string e = error_of([&] { checkpoint_state_from_json(legacy_state(5, 2, "not toml ["), s, "state.json"); });
  EXPECT_NE(e.find("data_index = 5"), std::string::npos) << e;
  EXPECT_NE(e.find("state.json"), std::string::npos) << e;
  EXPECT_EQ(error_of([&] { checkpoint_state_from_json(legacy_state(0, 2, "not toml ["), s, "state.json"); }), "");
  EXPECT_EQ(s.data, (DataPosition{1, 0}));
  // The current format: samples and the layout fields, each range-checked.
  nlohmann::json now = legacy_state(0, 2, toml);
  now.erase("data_index");
  now.update({{"data_sample", 77}, {"tensor_parallel", 1}, {"pipeline_parallel", 2}, {"zero_stage", 2},
              {"batch_size", 8}, {"grad_accum", 1}, {"seq_len", 32}});
  checkpoint_state_from_json(now, s, "state.json");
  EXPECT_EQ(s.data, (DataPosition{1, 77}));
  EXPECT_FALSE(s.position_converted);
  EXPECT_EQ(s.pipeline_parallel, 2);
  EXPECT_EQ(s.zero_stage, 2);
  now["zero_stage"] = 4;
  EXPECT_NE(error_of([&] { checkpoint_state_from_json(now, s, "state.json"); }).find("zero_stage"),
            std::string::npos);
}

TEST(CheckpointPaths, SaysWhatWasGivenInsteadOfACheckpoint) {
  const fs::path d = testsupport::temp_dir("checkpoint-paths");
  const fs::path run = d / "run", ckpts = run / "checkpoints", step = ckpts / "step_00000020";
  fs::create_directories(step);
  std::ofstream(run / "config.toml") << "";
  std::ofstream(step / "model.safetensors") << "";
  // Written but not marked complete: an interrupted write.
  EXPECT_NE(why_not_a_checkpoint(step.string()).find("interrupted"), std::string::npos);
  std::ofstream(step / "COMPLETE") << "20\n";
  EXPECT_EQ(why_not_a_checkpoint(step.string()), "");
  std::string why = why_not_a_checkpoint(run.string());
  EXPECT_NE(why.find("is a run directory, not a checkpoint"), std::string::npos) << why;
  EXPECT_NE(why.find(step.string()), std::string::npos) << why;
  why = why_not_a_checkpoint(ckpts.string() + "/");
  EXPECT_NE(why.find("is a folder of checkpoints"), std::string::npos) << why;
  why = why_not_a_checkpoint((step / "model.safetensors").string());
  EXPECT_NE(why.find("is a file of a checkpoint: give its folder"), std::string::npos) << why;
  fs::create_directories(d / "empty");
  why = why_not_a_checkpoint((d / "empty").string());
  EXPECT_NE(why.find("is a directory but not a checkpoint"), std::string::npos) << why;
  EXPECT_EQ(why.find("interrupted"), std::string::npos) << why;
  why = why_not_a_checkpoint((d / "absent").string());
  EXPECT_NE(why.find("does not exist"), std::string::npos) << why;
  // read_checkpoint says the same.
  EXPECT_NE(error_of([&] { read_checkpoint(run.string(), false); }).find("is a run directory"),
            std::string::npos);
  // --resume takes the run directory.
  EXPECT_EQ(error_of([&] { check_resume_directory(run.string()); }), "");
  why = error_of([&] { check_resume_directory(step.string()); });
  EXPECT_NE(why.find("is a checkpoint folder"), std::string::npos) << why;
  EXPECT_NE(why.find("--resume " + run.string() + " --checkpoint 20"), std::string::npos) << why;
  why = error_of([&] { check_resume_directory(ckpts.string()); });
  EXPECT_NE(why.find("--resume " + run.string()), std::string::npos) << why;
  EXPECT_NE(error_of([&] { check_resume_directory((d / "absent").string()); }).find("no such run directory"),
            std::string::npos);
  EXPECT_NE(error_of([&] { check_resume_directory((d / "empty").string()); }).find("not a run directory"),
            std::string::npos);
  fs::remove_all(d);
}
