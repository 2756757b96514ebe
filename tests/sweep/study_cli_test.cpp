// `aiscale scale` on bad input (clear errors, nothing overwritten) and a dry run that
// writes the study directory without running anything. No mpirun needed.
#include <gtest/gtest.h>

#include <fstream>

#include "aiscale/core/error.h"
#include "aiscale/sweep/study.h"
#include "../support/run_support.h"

namespace aiscale::sweep {
namespace {
namespace fs = std::filesystem;
using testsupport::run_aiscale;

const char* kBenchStudy = R"(name = "tiny"
kind = "weak"
counts = [1, 2]
repeats = 2
[workload]
type = "bench"
suite = "language"
options = ["--model", "gpt-tiny"]
batch = 2
[measure]
steps = [2, 4]
)";

std::string write(const fs::path& dir, const std::string& name, const std::string& text) {
  std::ofstream(dir / name) << text;
  return (dir / name).string();
}

TEST(ScaleStudy, ParsesAndExpandsPoints) {
  Study s = parse_study(kBenchStudy, "tiny.toml", ".");
  auto points = study_points(s);
  ASSERT_EQ(points.size(), 4u);
  EXPECT_EQ(points[0].id, "n1-fp32-r1");
  EXPECT_EQ(points[1].id, "n2-fp32-r1");  // repeats outermost
  EXPECT_EQ(points[2].id, "n1-fp32-r2");
  EXPECT_EQ(points[1].batch, 2);  // weak: fixed per rank
  auto argv = point_argv(s, points[1], "/x/points/n2-fp32-r1");
  const std::vector<std::string> tail = {"--warmup", "1", "--steps", "3", "--run-dir", "/x/points/n2-fp32-r1/run"};
  ASSERT_GE(argv.size(), tail.size());
  EXPECT_TRUE(std::equal(tail.begin(), tail.end(), argv.end() - tail.size()));
  EXPECT_EQ(s.study_id().size(), 16u);
  EXPECT_EQ(s.study_id(), parse_study(kBenchStudy, "other-name.toml", ".").study_id());
}

TEST(ScaleStudy, StrongSplitsTheGlobalBatchOrRefuses) {
  std::string text = kBenchStudy;
  text.replace(text.find("kind = \"weak\""), 13, "kind = \"strong\"");
  text.replace(text.find("batch = 2"), 9, "global_batch = 8\ngrad_accum = 2");
  text.replace(text.find("counts = [1, 2]"), 15, "counts = [1, 2, 4]");
  auto points = study_points(parse_study(text, "s.toml", "."));
  EXPECT_EQ(points[0].batch, 4);  // 8 / (1 x 2)
  EXPECT_EQ(points[2].batch, 1);  // 8 / (4 x 2)
  text.replace(text.find("counts = [1, 2, 4]"), 18, "counts = [1, 3]");
  try {
    study_points(parse_study(text, "s.toml", "."));
    FAIL() << "count 3 does not divide 8";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("count 3 does not divide the global batch 8"), std::string::npos) << e.what();
  }
}

TEST(ScaleStudy, RefusesBadDescriptions) {
  auto error_of = [](const std::string& text) -> std::string {
    try {
      parse_study(text, "s.toml", ".");
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  std::string unknown = std::string(kBenchStudy) + "colour = \"red\"\n";
  // A top-level key after [measure] belongs to that table.
  EXPECT_NE(error_of(unknown).find("unknown key 'measure.colour'"), std::string::npos) << error_of(unknown);
  EXPECT_NE(error_of(unknown).find("steps, epoch, epochs"), std::string::npos);
  EXPECT_NE(error_of("nmae = \"x\"\n" + std::string(kBenchStudy)).find("unknown key 'nmae'; allowed keys: name,"),
            std::string::npos);
  std::string decreasing = kBenchStudy;
  decreasing.replace(decreasing.find("[1, 2]"), 6, "[2, 1]");
  EXPECT_NE(error_of(decreasing).find("is not increasing"), std::string::npos);
  std::string owned = kBenchStudy;
  owned.replace(owned.find("\"gpt-tiny\"]"), 11, "\"gpt-tiny\", \"--steps\", \"5\"]");
  EXPECT_NE(error_of(owned).find("'--steps', which the study sets"), std::string::npos) << error_of(owned);
}

TEST(ScaleCli, DryRunWritesTheStudyDirectory) {
  auto dir = testsupport::temp_dir("scale-dry");
  const std::string study = write(dir, "tiny.toml", kBenchStudy);
  auto r = run_aiscale("scale " + study + " -o " + (dir / "out").string() + " --dry-run");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto index = nlohmann::json::parse(testsupport::read_bytes(dir / "out/study.json"));
  EXPECT_EQ(index["format"], "aiscale-study");
  EXPECT_EQ(index["points"].size(), 4u);
  EXPECT_EQ(index["points"][1]["state"], "pending");
  auto cmd = nlohmann::json::parse(testsupport::read_bytes(dir / "out/points/n2-fp32-r1/command.json"));
  EXPECT_EQ(cmd["ranks"], 2);
  EXPECT_EQ(cmd["argv"][0], "bench");
  EXPECT_TRUE(fs::exists(dir / "out/study.toml"));
  // The same study again reopens the folder.
  r = run_aiscale("scale " + study + " -o " + (dir / "out").string() + " --dry-run");
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

TEST(ScaleCli, RefusesAnotherStudysFolderAndACorruptIndex) {
  auto dir = testsupport::temp_dir("scale-other");
  const std::string study = write(dir, "tiny.toml", kBenchStudy);
  ASSERT_EQ(run_aiscale("scale " + study + " -o " + (dir / "out").string() + " --dry-run").exit_code, 0);
  const std::string before = testsupport::read_bytes(dir / "out/study.json");
  std::string other = kBenchStudy;
  other.replace(other.find("name = \"tiny\""), 13, "name = \"other\"");
  const std::string other_path = write(dir, "other.toml", other);
  auto r = run_aiscale("scale " + other_path + " -o " + (dir / "out").string() + " --dry-run");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("holds another study: 'tiny'"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("not 'other'"), std::string::npos) << r.output;
  EXPECT_EQ(testsupport::read_bytes(dir / "out/study.json"), before);

  std::ofstream(dir / "out/study.json") << "{ not json";
  r = run_aiscale("scale " + study + " -o " + (dir / "out").string());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("study.json' is corrupt"), std::string::npos) << r.output;
  EXPECT_EQ(testsupport::read_bytes(dir / "out/study.json"), "{ not json");

  const std::string bad = write(dir, "bad.toml", std::string(kBenchStudy).replace(0, 0, "speed = 3\n"));
  r = run_aiscale("scale " + bad + " -o " + (dir / "new").string());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("unknown key 'speed'"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir / "new"));
}

// A point listed twice, or one that could never run, is refused before anything is written
// or run, naming the point and the fix.
TEST(ScaleCli, RefusesDuplicateAndImpossiblePointsBeforeAnyRuns) {
  auto dir = testsupport::temp_dir("scale-points");
  auto refused = [&](const std::string& from, const std::string& to, const std::string& extra = "") {
    std::string text = kBenchStudy;
    text.replace(text.find(from), from.size(), to);
    const std::string study = write(dir, "s.toml", text);
    fs::remove_all(dir / "out");
    auto r = run_aiscale("scale " + study + " -o " + (dir / "out").string() + " --mpirun /bin/false" + extra);
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_FALSE(fs::exists(dir / "out")) << r.output;
    return r.output;
  };
  const std::string path = (dir / "s.toml").string();
  std::string m = refused("counts = [1, 2]", "counts = [1, 2, 2]");
  EXPECT_NE(m.find(path + ": counts = [1, 2, 2] lists 2 twice: its points (n2-fp32-r1, ...) would be "
                   "measured once and counted twice"), std::string::npos) << m;
  EXPECT_NE(m.find("repeats = N"), std::string::npos) << m;
  m = refused("kind = \"weak\"", "kind = \"weak\"\nprecisions = [\"fp32\", \"fp32\"]");
  EXPECT_NE(m.find("lists \"fp32\" twice: its points (n1-fp32-r1, ...)"), std::string::npos) << m;
  m = refused("kind = \"weak\"", "kind = \"weak\"\nprecisions = [\"fp32\", \"bf16\"]");
  EXPECT_NE(m.find("precision \"bf16\" needs device = \"cuda\""), std::string::npos) << m;
  EXPECT_NE(m.find("n1-bf16-r1"), std::string::npos) << m;
  m = refused("counts = [1, 2]", "counts = [1, 100000]");
  EXPECT_NE(m.find("point n100000-fp32-r1 starts 100000 ranks, but this machine gives this process"),
            std::string::npos) << m;
  EXPECT_NE(m.find("--oversubscribe"), std::string::npos) << m;
  m = refused("counts = [1, 2]", "counts = [1, 10000000000]");
  EXPECT_NE(m.find(path + ":3: an element of counts = 10000000000 is too large: it must be at most 2^20"),
            std::string::npos) << m;
  m = refused("\"gpt-tiny\"]", "\"gpt-tiny\", \"--modle\", \"x\"]");
  EXPECT_NE(m.find("point n1-fp32-r1 could never run: aiscale refuses its command"), std::string::npos) << m;
  EXPECT_NE(m.find("--modle"), std::string::npos) << m;
  EXPECT_NE(m.find("fix workload.options"), std::string::npos) << m;
  m = refused("kind = \"weak\"", "kind = \"weak\"\ndevice = \"cuda\"");
  EXPECT_TRUE(m.find("built without CUDA") != std::string::npos ||
              m.find("needs 2 GPUs (one rank per GPU)") != std::string::npos) << m;
  // A dry run writes the commands for another executor: the machine's cores do not limit it.
  std::string text = kBenchStudy;
  text.replace(text.find("counts = [1, 2]"), 15, "counts = [1, 100000]");
  auto r = run_aiscale("scale " + write(dir, "big.toml", text) + " -o " + (dir / "big").string() + " --dry-run");
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

// A train workload: each point's settings go through the train config before any point runs.
TEST(ScaleCli, ChecksATrainWorkloadsConfigForEveryPoint) {
  auto dir = testsupport::temp_dir("scale-train-check");
  testsupport::write_byte_shards(dir, 3000, 2000);
  const std::string cfg = testsupport::tiny_config(dir);
  // Two tensor-parallel ranks: a 1-rank point cannot hold that layout.
  const std::string study = write(dir, "s.toml",
      "name = \"tp\"\nkind = \"weak\"\ncounts = [1, 2]\n[workload]\ntype = \"train\"\nconfig = \"" + cfg +
      "\"\nset = [\"parallel.tensor_parallel=2\"]\nbatch = 2\n[measure]\nsteps = [2, 4]\n");
  auto r = run_aiscale("scale " + study + " -o " + (dir / "out").string() + " --mpirun /bin/false");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("point n1-fp32-r1 (1 rank(s), fp32) could never run"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir / "out"));
}

}  // namespace
}  // namespace aiscale::sweep
