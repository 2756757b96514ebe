// `aiscale train --profile` and `aiscale bench language --profile` on the CPU: the trace is
// valid trace-event JSON, the op table accounts for the measured step time, bad --profile
// values fail with a message naming the option.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include "../support/run_support.h"
#include "trace_check.h"

using namespace aiscale;
using namespace aiscale::testsupport;

namespace {

class Profile : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = temp_dir("profile");
    write_byte_shards(dir_);
    config_ = tiny_config(dir_);
  }
  static fs::path dir_;
  static std::string config_;
};
fs::path Profile::dir_;
std::string Profile::config_;

nlohmann::json read_json(const fs::path& p) { return nlohmann::json::parse(read_bytes(p)); }

TEST_F(Profile, TrainWritesAValidTraceAndAnOpTableThatAccountsForTheStep) {
  auto r = run_aiscale("train -q -c " + config_ +
                       " --profile 3 --set train.steps=5 train.warmup_steps=1 run.name=prof");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const fs::path prof = dir_ / "runs/prof/profile";
  const nlohmann::json trace = read_json(prof / "trace.json");
  EXPECT_EQ(check_trace(trace), "");
  // Three steps, the ops of the model with their names, data loading on its own track.
  int steps = 0, matmuls = 0, data = 0;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] != "X") continue;
    if (e["cat"] == "step") ++steps;
    if (e["name"] == "matmul_forward") ++matmuls;
    if (e["cat"] == "data") ++data;
  }
  EXPECT_EQ(steps, 3);
  EXPECT_EQ(matmuls, 3 * (4 * 2 + 1));  // 4 per layer (gpt-tiny: 2 layers) + the logits
  EXPECT_EQ(data, 3);
  const nlohmann::json table = read_json(prof / "op_table.json");
  EXPECT_EQ(table["profiled_steps"], 3);
  const double step_s = table["step_time_s"], rows_s = table["rows_total_s"];
  ASSERT_GT(step_s, 0);
  EXPECT_NEAR(rows_s / step_s, 1.0, 0.05) << table.dump(2);
  bool matmul_rate = false;
  for (const auto& row : table["rows"]) {
    EXPECT_GT(row["calls"].get<int>(), 0);
    if (row["op"] == "matmul_forward") matmul_rate = row["achieved_tflops"].get<double>() > 0;
  }
  EXPECT_TRUE(matmul_rate);
  EXPECT_TRUE(fs::exists(prof / "op_table.md"));
  EXPECT_NE(r.output.find("| matmul_backward |"), std::string::npos) << r.output;
}

TEST_F(Profile, BadStepCountsNameTheOption) {
  for (const char* n : {"0", "-2"}) {
    auto r = run_aiscale("train -q -c " + config_ + " --profile " + n + " --set run.name=bad" + n);
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.output.find("--profile " + std::string(n) + ": the number of steps to profile must be at least 1"),
              std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(dir_ / ("runs/bad" + std::string(n))));
  }
  auto r = run_aiscale("train -q -c " + config_ + " --profile 5 --set train.steps=5 run.name=toomany");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--profile 5: the run has only 4 step(s) after its 1 warm-up step(s); "
                          "profile at most 4 or raise train.steps (--steps) to 6"),
            std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "runs/toomany"));
}

TEST_F(Profile, UnwritableRunDirectoryIsNamed) {
  if (::geteuid() == 0) GTEST_SKIP() << "root writes anywhere";
  const fs::path locked = dir_ / "locked";
  fs::create_directories(locked);
  ::chmod(locked.c_str(), 0500);
  auto r = run_aiscale("train -q -c " + config_ + " --set run.dir=\"" + (locked / "runs").string() + "\"");
  ::chmod(locked.c_str(), 0700);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("run.dir"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("permission denied"), std::string::npos) << r.output;
}

TEST_F(Profile, RunDirectoryUnderAFileIsNamed) {
  const fs::path file = dir_ / "a_file";
  std::ofstream(file) << "x";
  auto r = run_aiscale("train -q -c " + config_ + " --set run.dir=\"" + (file / "runs").string() + "\"");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("run.dir (--set run.dir=DIR) '" + (file / "runs").string() + "'"), std::string::npos)
      << r.output;
}

TEST_F(Profile, BenchLanguageWritesBesideItsOutput) {
  const std::string common = "bench language --n-layer 1 --n-head 2 --n-embd 32 --vocab-size 256 "
                             "--block-size 32 --seq-len 32 --batch-size 2 --threads 1 --steps 3 --warmup 1";
  auto none = run_aiscale(common + " --profile 2");
  EXPECT_NE(none.exit_code, 0);
  EXPECT_NE(none.output.find("--profile 2: say where the profile goes"), std::string::npos) << none.output;
  auto many = run_aiscale(common + " --profile 4 -o " + (dir_ / "b.jsonl").string());
  EXPECT_NE(many.exit_code, 0);
  EXPECT_NE(many.output.find("--profile 4: the run has only 3 step(s)"), std::string::npos) << many.output;
  auto r = run_aiscale(common + " --profile 2 -o " + (dir_ / "bench.jsonl").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(check_trace(read_json(dir_ / "bench.jsonl.trace.json")), "");
  EXPECT_EQ(read_json(dir_ / "bench.jsonl.op_table.json")["profiled_steps"], 2);
  EXPECT_TRUE(fs::exists(dir_ / "bench.jsonl.op_table.md"));
}

}  // namespace
