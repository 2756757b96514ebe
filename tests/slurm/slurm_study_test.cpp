// Study submission, status and resubmission against stand-in Slurm commands (shell
// scripts on PATH): a refused sbatch leaves the study as it was, died jobs are reported
// with their log's tail, resubmission skips finished and queued points. The real Slurm
// run is tests/slurm/slurm_cluster_slurmtest.cpp.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "../support/run_support.h"
#include "aiscale/core/error.h"
#include "aiscale/orchestrate/study_files.h"
#include "aiscale/orchestrate/study_status.h"
#include "aiscale/orchestrate/study_submit.h"

using namespace aiscale;
using namespace aiscale::orchestrate;
using namespace aiscale::testsupport;

namespace {

void write_exe(const fs::path& p, const std::string& body) {
  std::ofstream(p) << "#!/bin/sh\n" << body;
  fs::permissions(p, fs::perms::owner_all);
}

// A study of points n1, n2, n4 and stand-in Slurm commands under dir/bin. sbatch numbers
// its jobs 100, 101, ... and refuses call number $FAIL_AT; squeue prints dir/queue;
// scontrol prints dir/job-<id> (or fails); scancel appends its arguments to dir/cancelled.
struct FakeSlurm {
  fs::path dir, study;
  std::string old_path;
  explicit FakeSlurm(const std::string& name) {
    dir = temp_dir(name);
    study = dir / "study";
    for (int n : {1, 2, 4}) {
      fs::create_directories(study / "points" / ("n" + std::to_string(n)));
      std::ofstream(study / "points" / ("n" + std::to_string(n)) / "command.json")
          << "{\"ranks\": " << n << ", \"argv\": [\"train\", \"--config\", \"t.toml\"]}";
    }
    fs::create_directories(dir / "bin");
    const std::string d = dir.string();
    write_exe(dir / "bin/sbatch",
              "n=$(cat " + d + "/count 2>/dev/null || echo 0); n=$((n+1)); echo $n > " + d + "/count\n"
              "echo \"$@\" >> " + d + "/sbatch-args\n"
              "if [ \"$n\" = \"${FAIL_AT:-0}\" ]; then echo 'sbatch: error: Invalid account or "
              "account/partition combination specified' >&2; exit 1; fi\n"
              "echo $((99 + n))\n");
    write_exe(dir / "bin/squeue", "cat " + d + "/queue 2>/dev/null\n");
    write_exe(dir / "bin/scontrol",
              "[ \"$1\" = show ] && [ \"$2\" = job ] && [ -f " + d + "/job-$3 ] && exec cat " + d +
                  "/job-$3\n[ \"$2\" = config ] && { echo 'AccountingStorageType = accounting_storage/none'; exit 0; }\n"
                  "echo 'slurm_load_jobs error: Invalid job id specified' >&2; exit 1\n");
    write_exe(dir / "bin/scancel", "echo \"$@\" >> " + d + "/cancelled\n");
    old_path = std::getenv("PATH");
    ::setenv("PATH", ((dir / "bin").string() + ":" + old_path).c_str(), 1);
  }
  ~FakeSlurm() {
    ::setenv("PATH", old_path.c_str(), 1);
    ::unsetenv("FAIL_AT");
  }
};

SubmitOptions cpu_options() {
  SubmitOptions o;
  o.job.partition = "debug";
  o.job.tasks_per_node = 4;
  o.job.time = "10";
  o.job.aiscale = "/opt/aiscale";
  return o;
}

}  // namespace

TEST(SlurmStudy, ChainSubmitsEveryPointAfterThePreviousOne) {
  FakeSlurm f("slurm-chain");
  auto r = submit_study(f.study.string(), cpu_options(), nullptr);
  ASSERT_EQ(r.submitted.size(), 3u);
  EXPECT_EQ(r.submitted[0], (std::pair<std::string, std::string>{"n1", "100"}));
  EXPECT_EQ(r.submitted[2], (std::pair<std::string, std::string>{"n4", "102"}));
  std::string args = read_bytes(f.dir / "sbatch-args");
  EXPECT_NE(args.find("--dependency=afterany:100 "), std::string::npos) << args;
  EXPECT_NE(args.find("--dependency=afterany:101 "), std::string::npos) << args;
  SlurmRecord rec = load_slurm_record(f.study.string());
  ASSERT_NE(rec.current("n2"), nullptr);
  EXPECT_EQ(rec.current("n2")->job_id, "101");
  std::string script = read_bytes(f.study / "slurm" / "n4.sbatch");
  EXPECT_NE(script.find("#SBATCH --ntasks-per-node=4\n"), std::string::npos) << script;
  EXPECT_NE(script.find("#SBATCH --output=" + (f.study / "points/n4/log.txt").string()), std::string::npos);
  EXPECT_NE(script.find("#SBATCH --chdir=" + f.study.string()), std::string::npos);
  EXPECT_NE(script.find("\"$AISCALE\" train --config t.toml\n"), std::string::npos) << script;
}

TEST(SlurmStudy, RefusedSbatchCancelsTheJobsBeforeItAndLeavesTheStudyAsItWas) {
  FakeSlurm f("slurm-refused");
  ::setenv("FAIL_AT", "3", 1);
  std::string msg;
  try {
    submit_study(f.study.string(), cpu_options(), nullptr);
  } catch (const Error& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find("sbatch refused the job of point n4"), std::string::npos) << msg;
  EXPECT_NE(msg.find("Invalid account"), std::string::npos) << msg;
  EXPECT_NE(msg.find("cancelled: 100, 101"), std::string::npos) << msg;
  EXPECT_NE(msg.find("the study is unchanged"), std::string::npos) << msg;
  EXPECT_EQ(read_bytes(f.dir / "cancelled"), "100\n101\n");
  EXPECT_FALSE(fs::exists(f.study / "slurm.json"));
  EXPECT_TRUE(!fs::exists(f.study / "slurm") || fs::is_empty(f.study / "slurm"));
}

TEST(SlurmStudy, StatusReportsDiedJobsWithTheirLogAndResubmitsOnlyThose) {
  FakeSlurm f("slurm-status");
  submit_study(f.study.string(), cpu_options(), nullptr);
  // n1 completed (gone from squeue, known to scontrol), n2 hit its time limit, n4 runs.
  std::ofstream(f.dir / "queue") << "102|RUNNING|None\n";
  std::ofstream(f.dir / "job-100") << "JobId=100 JobName=x\n   JobState=COMPLETED Reason=None ExitCode=0:0\n";
  std::ofstream(f.dir / "job-101") << "JobId=101 JobName=x\n   JobState=TIMEOUT Reason=TimeLimit ExitCode=0:15\n";
  std::ofstream(f.study / "points/n2/log.txt") << "step 1\nstep 2\nslurmstepd: error: *** JOB 101 CANCELLED DUE TO TIME LIMIT ***\n";
  auto st = poll_study(f.study.string());
  ASSERT_EQ(st.size(), 3u);
  EXPECT_TRUE(st[0].completed);
  EXPECT_TRUE(st[1].died);
  EXPECT_EQ(st[1].state, "TIMEOUT");
  EXPECT_TRUE(st[2].active);
  std::string table = format_status(st);
  EXPECT_NE(table.find("n2 (job 101) died: TIMEOUT"), std::string::npos) << table;
  EXPECT_NE(table.find("CANCELLED DUE TO TIME LIMIT"), std::string::npos) << table;
  EXPECT_EQ(load_slurm_record(f.study.string()).current("n2")->state, "TIMEOUT");

  // Waiting ends at once for died jobs; a running one times out with its name.
  WaitOptions w;
  w.timeout_s = 0.3;
  w.first_poll_s = 0.1;
  std::string msg;
  try {
    wait_for_study(f.study.string(), w);
  } catch (const Error& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find("n4 (job 102, RUNNING)"), std::string::npos) << msg;

  // Resubmission: only n2 (n1 completed, n4 still running), after n4's job.
  auto r = submit_study(f.study.string(), cpu_options(), nullptr);
  ASSERT_EQ(r.submitted.size(), 1u);
  EXPECT_EQ(r.submitted[0].first, "n2");
  EXPECT_EQ(r.skipped.size(), 2u);
  std::string args = read_bytes(f.dir / "sbatch-args");
  EXPECT_NE(args.rfind("--dependency=afterany:102 "), std::string::npos) << args;
  EXPECT_EQ(load_slurm_record(f.study.string()).points["n2"].size(), 2u);
}

TEST(SlurmStudy, ArrayModeGroupsPointsOfOneShapeAndJobsThatCannotStartAreNotWaitedFor) {
  FakeSlurm f("slurm-array");
  std::ofstream(f.study / "points/n1b/command.json").flush();
  fs::create_directories(f.study / "points/n1b");
  std::ofstream(f.study / "points/n1b/command.json") << "{\"ranks\": 1, \"argv\": [\"bench\", \"language\"]}";
  SubmitOptions o = cpu_options();
  o.mode = "array";
  auto r = submit_study(f.study.string(), o, nullptr);
  ASSERT_EQ(r.submitted.size(), 4u);
  std::string script = read_bytes(f.study / "slurm/array-ranks1.sbatch");
  EXPECT_NE(script.find("#SBATCH --array=0-1%1\n"), std::string::npos) << script;
  EXPECT_NE(script.find("args=(bench language)"), std::string::npos) << script;
  SlurmRecord rec = load_slurm_record(f.study.string());
  EXPECT_EQ(rec.current("n1")->job_id, "100_0");
  EXPECT_EQ(rec.current("n1b")->job_id, "100_1");
  std::ofstream(f.dir / "queue") << "100_0|PENDING|PartitionNodeLimit\n100_1|PENDING|Dependency\n";
  auto st = poll_study(f.study.string());
  EXPECT_TRUE(st[0].died) << st[0].reason;
  EXPECT_FALSE(st[0].active);
  EXPECT_NE(st[0].reason.find("can never start"), std::string::npos);
}

TEST(SlurmStudy, MalformedPointsAreNamed) {
  auto dir = temp_dir("slurm-bad-study");
  std::string msg;
  try {
    read_study_points(dir.string());
  } catch (const Error& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find("no points/ folder"), std::string::npos) << msg;
  fs::create_directories(dir / "points/a");
  std::ofstream(dir / "points/a/command.json") << "{\"ranks\": 0, \"argv\": [\"train\"]}";
  msg.clear();
  try {
    read_study_points(dir.string());
  } catch (const Error& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find("points/a/command.json: \"ranks\" must be a positive integer"), std::string::npos) << msg;
}

// A point whose command this aiscale does not run is refused before any job is submitted,
// naming its command.json; a point id that is no job name is made one.
TEST(SlurmStudy, APointsCommandIsCheckedBeforeAnyJobIsSubmitted) {
  FakeSlurm f("slurm-command-check");
  std::ofstream(f.study / "points/n2/command.json") << "{\"ranks\": 2, \"argv\": [\"trian\", \"--config\", \"t.toml\"]}";
  auto r = run_aiscale("slurm submit " + f.study.string() + " --partition debug --time 10");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("n2/command.json: point n2's command is not one aiscale runs (trian --config "
                          "t.toml): 'trian' is not an aiscale command"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(f.dir / "sbatch-args"));
  EXPECT_FALSE(fs::exists(f.study / "slurm.json"));

  fs::remove_all(f.study / "points/n2");
  fs::create_directories(f.study / "points/n 2");
  std::ofstream(f.study / "points/n 2/command.json") << "{\"ranks\": 2, \"argv\": [\"train\", \"--config\", \"t.toml\"]}";
  SubmitOptions o = cpu_options();
  o.dry_run = true;
  o.mode = "array";  // the log of a point with a blank goes to a quoted shell line
  auto result = submit_study(f.study.string(), o, nullptr);
  ASSERT_EQ(result.submitted.size(), 3u);
  o.mode = "chain";  // ... but an #SBATCH --output value ends at the blank: refused, named
  try {
    submit_study(f.study.string(), o, nullptr);
    FAIL() << "a log path with a blank went into an #SBATCH line";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the log of point n 2"), std::string::npos) << e.what();
  }
}
