// A failing rank's error reaches the user: printed by the rank (with its rank) before its
// communicator goes, recorded in the run directory, and summarised in one line by
// `aiscale launch`; an error every rank finds alike before any communicator is printed once.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>

#include "../support/run_support.h"

using namespace aiscale::testsupport;

namespace {

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

std::string last_line(const std::string& text) {
  std::string t = text;
  while (!t.empty() && t.back() == '\n') t.pop_back();
  const size_t nl = t.rfind('\n');
  return nl == std::string::npos ? t : t.substr(nl + 1);
}

class FailureReport : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = temp_dir("failure-report");
    write_byte_shards(dir_, 20000, 2000);
    config_ = tiny_config(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
  std::string config_;
};

TEST_F(FailureReport, ARankLocalFailureIsPrintedRecordedAndSummarised) {
  const auto start = std::chrono::steady_clock::now();
  auto r = run_aiscale("launch -n 2 --threads-per-rank 1 -- train -q -c " + config_ +
                           " --set run.name=fails train.steps=6",
                       "AISCALE_FAULT=fail@2:1 timeout 120");
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.exit_code, 124) << r.output;  // rank 0 did not wait for rank 1 until a time-out
  EXPECT_LT(seconds, 60.0) << r.output;
  // The failing rank says why, with its rank...
  EXPECT_NE(r.output.find("[rank 1] error: AISCALE_FAULT=fail@2:1: rank 1 fails on purpose after "
                          "step 2"), std::string::npos) << r.output;
  // ...the launcher's last line names it...
  EXPECT_EQ(last_line(r.output).rfind("launch: 1 of 2 rank(s) failed — rank 1: AISCALE_FAULT=fail@2:1", 0),
            0u) << r.output;
  EXPECT_NE(last_line(r.output).find("(the other 1 ended with them)"), std::string::npos) << r.output;
  // ...and the run directory keeps it.
  const std::string log = read_bytes(dir_ / "runs/fails/errors.log");
  EXPECT_NE(log.find("rank 1 ("), std::string::npos) << log;
  EXPECT_NE(log.find("error: AISCALE_FAULT=fail@2:1"), std::string::npos) << log;
}

TEST_F(FailureReport, ALayoutTheWorldCannotHoldIsRefusedOnceBeforeAnyCommunicator) {
  // gpt-tiny (2 layers, 2 heads) splits in tp 2 x pp 2, a valid config that 2 ranks cannot hold.
  auto r = run_aiscale("launch -n 2 --threads-per-rank 1 -- train -q -c " + config_ +
                           " --set run.name=layout parallel.tensor_parallel=2 "
                           "parallel.pipeline_parallel=2 parallel.microbatches=2",
                       "timeout 120");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.exit_code, 124) << r.output;
  EXPECT_EQ(count(r.output, "error: "), 1u) << r.output;  // printed once, by rank 0
  EXPECT_NE(r.output.find("pipeline_parallel"), std::string::npos) << r.output;
  EXPECT_EQ(last_line(r.output).rfind("launch: 2 of 2 rank(s) failed — ranks 0, 1: ", 0), 0u)
      << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "runs/layout/metrics.jsonl"));
}

TEST_F(FailureReport, RanksStartedWithOtherLayoutsStopBeforeTheGroupsAreBuilt) {
  std::string mpirun = "mpirun --oversubscribe --bind-to none -x OMP_NUM_THREADS=1";
  if (::geteuid() == 0) mpirun += " --allow-run-as-root";
  const std::string bin = AISCALE_BINARY;
  const std::string common = " train -q -c " + config_ + " --set run.name=mixed train.steps=4";
  const auto start = std::chrono::steady_clock::now();
  auto r = run_command("timeout 120 " + mpirun + " -np 1 " + bin + common +
                       " parallel.tensor_parallel=2 : -np 1 " + bin + common);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.exit_code, 124) << r.output;
  EXPECT_LT(seconds, 60.0) << r.output;
  EXPECT_NE(r.output.find("parallel.tensor_parallel: rank 0 has 2, this rank 1"), std::string::npos)
      << r.output;
}

}  // namespace
