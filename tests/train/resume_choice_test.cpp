// Resume from a chosen checkpoint, past a corrupt newest one, and never into another model:
// checkpoint metadata is validated before any buffer is sized from it.
#include <gtest/gtest.h>

#include <cstring>

#include "aiscale/core/error.h"
#include "aiscale/train/checkpoint.h"
#include "aiscale/train/safetensors.h"
#include "../support/error_of.h"
#include "../support/run_support.h"

using namespace aiscale;
using namespace aiscale::testsupport;

namespace {

class ResumeChoice : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = temp_dir("resume-choice");
    write_byte_shards(dir_, 20000, 2000);
    config_ = tiny_config(dir_);
    auto r = run_aiscale("train -q -c " + config_ +
                         " --set run.name=base train.steps=12 run.checkpoint_every=4 "
                         "run.keep_checkpoints=5");
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  // A fresh copy of the finished base run (checkpoints 4, 8, 12).
  static fs::path copy_run(const std::string& name) {
    fs::path to = dir_ / "runs" / name;
    fs::remove_all(to);
    fs::copy(dir_ / "runs/base", to, fs::copy_options::recursive);
    return to;
  }
  static fs::path dir_;
  static std::string config_;
};
fs::path ResumeChoice::dir_;
std::string ResumeChoice::config_;

TEST_F(ResumeChoice, ChosenCheckpointContinuesThereAndSetsNewerAside) {
  fs::path run = copy_run("chosen");
  auto r = run_aiscale("train -q --resume " + run.string() + " --checkpoint 8 --set train.steps=14");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("resuming at step 8"), std::string::npos) << r.output;
  EXPECT_TRUE(fs::exists(run / "checkpoints/step_00000012.superseded/COMPLETE"));
  EXPECT_TRUE(fs::exists(run / "checkpoints/step_00000014/COMPLETE"));
  auto metrics = read_metrics(run);
  ASSERT_EQ(metrics.size(), 14u);
  EXPECT_EQ(metrics.back()["step"], 14);
  // A step without a complete checkpoint is refused, listing those that exist.
  r = run_aiscale("train -q --resume " + run.string() + " --checkpoint 7 --set train.steps=20");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("complete ones: 4, 8, 12, 14"), std::string::npos) << r.output;
}

TEST_F(ResumeChoice, CorruptNewestIsReportedAndFallbackUsesTheNewestGood) {
  fs::path run = copy_run("corrupt");
  fs::resize_file(run / "checkpoints/step_00000012/model.safetensors", 100);
  auto r = run_aiscale("train -q --resume " + run.string() + " --set train.steps=14");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("step_00000012/model.safetensors"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--resume-fallback"), std::string::npos) << r.output;
  r = run_aiscale("train -q --resume " + run.string() + " --resume-fallback --set train.steps=14");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("resuming at step 8"), std::string::npos) << r.output;
  EXPECT_TRUE(fs::exists(run / "checkpoints/step_00000012.corrupt"));
  EXPECT_EQ(fs::path(*train::latest_checkpoint((run / "checkpoints").string())).filename(),
            "step_00000014");
}

// Same parameter count, other shape: the old check compared counts and two fields only.
TEST_F(ResumeChoice, CheckpointOfAnotherShapeIsRefusedNamingBoth) {
  fs::path run = copy_run("shape");
  auto r = run_aiscale("train -q --resume " + run.string() +
                       " --set train.steps=14 model.n_head=4");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("n_head=2"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("n_head=4"), std::string::npos) << r.output;
}

TEST_F(ResumeChoice, EditedMetadataIsRefusedBeforeAnyBufferIsSized) {
  fs::path run = copy_run("edited");
  const fs::path ck = run / "checkpoints/step_00000012";
  const std::string original = read_bytes(ck / "config.json");
  auto with = [&](const std::string& from, const std::string& to) {
    std::string text = original;
    text.replace(text.find(from), from.size(), to);
    std::ofstream(ck / "config.json") << text;
    return error_of([&] { train::read_checkpoint(ck.string(), true); });
  };
  std::string e = with("\"n_embd\": 64", "\"n_embd\": 1e12");
  EXPECT_NE(e.find("config.json"), std::string::npos) << e;
  EXPECT_NE(e.find("n_embd"), std::string::npos) << e;
  e = with("\"vocab_size\": 256", "\"vocab_size\": 4611686018427387904");
  EXPECT_NE(e.find("vocab_size"), std::string::npos) << e;
  e = with("\"n_layer\": 2", "\"n_layer\": 3");  // another model than the weights and state
  EXPECT_NE(e.find("state.json"), std::string::npos) << e;
  std::ofstream(ck / "config.json") << original;
  // state.json: a negative step, a world size of zero.
  const std::string state = read_bytes(ck / "state.json");
  std::string bad = state;
  bad.replace(bad.find("\"world_size\": 1"), 15, "\"world_size\": 0");
  std::ofstream(ck / "state.json") << bad;
  e = error_of([&] { train::read_checkpoint(ck.string(), true); });
  EXPECT_NE(e.find("world_size"), std::string::npos) << e;
  std::ofstream(ck / "state.json") << state;
  EXPECT_EQ(error_of([&] { train::read_checkpoint(ck.string(), true); }), "");
}

// Pruning renames a checkpoint before deleting it; what a kill leaves is no checkpoint.
TEST_F(ResumeChoice, HalfDeletedCheckpointIsNeverLoaded) {
  fs::path run = copy_run("pruned");
  fs::create_directories(run / "checkpoints/step_00000099.deleting");
  std::ofstream(run / "checkpoints/step_00000099.deleting/COMPLETE") << "99\n";
  fs::create_directories(run / "checkpoints/step_00000098.corrupt");
  std::ofstream(run / "checkpoints/step_00000098.corrupt/COMPLETE") << "98\n";
  EXPECT_EQ(fs::path(*train::latest_checkpoint((run / "checkpoints").string())).filename(),
            "step_00000012");
  auto r = run_aiscale("train -q --resume " + run.string() + " --set train.steps=14 run.keep_checkpoints=2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_FALSE(fs::exists(run / "checkpoints/step_00000099.deleting"));  // cleaned up
  EXPECT_FALSE(fs::exists(run / "checkpoints/step_00000004"));           // pruned
  EXPECT_TRUE(fs::exists(run / "checkpoints/step_00000014/COMPLETE"));
}

TEST(Safetensors, HeaderWithOverflowingShapeIsCorruptNotAnAllocation) {
  std::vector<train::SafeTensor> ts = {{"a", {2}, {1, 2}}};
  std::string bytes = train::safetensors_serialize(ts);
  const std::string from = "\"shape\":[2]";
  // 2 x (2^62 + 1) elements of 4 bytes wrap around to 8 bytes: the old check passed it and
  // the allocation failed inside the library.
  const std::string to = "\"shape\":[2,4611686018427387905]";
  auto pos = bytes.find(from);
  ASSERT_NE(pos, std::string::npos);
  std::string header = bytes.substr(8, bytes.size() - 8 - 8);
  header.replace(header.find(from), from.size(), to);
  std::string edited(8, '\0');
  uint64_t n = header.size();
  std::memcpy(edited.data(), &n, 8);
  edited += header + bytes.substr(bytes.size() - 8);
  std::string e = error_of([&] { train::safetensors_parse(edited, "edited.safetensors"); });
  EXPECT_NE(e.find("edited.safetensors"), std::string::npos) << e;
  e = error_of([&] { train::safetensors_parse(std::string(8, '\0').replace(0, 1, "\2") + "[]", "list"); });
  EXPECT_NE(e.find("list"), std::string::npos) << e;
}

}  // namespace
