// aiscale against a real Slurm: tests/slurm/local_cluster.sh starts munged, slurmctld and
// slurmd (Debian's packages) on this machine with a configuration in a temporary folder;
// a study of 1 and 2 CPU ranks is submitted by `aiscale scale --scheduler slurm` as a
// chain, waited for, collected, analysed and reported; a site script is checked with sbatch --test-only; the daemons are stopped by
// their PIDs at the end, also when a test fails. Needs root. If the daemons cannot start,
// every test fails with the reason.
#include <gtest/gtest.h>

#include <unistd.h>

#include <fstream>

#include "../support/quickstart_study.h"
#include "../support/run_support.h"

using namespace aiscale::testsupport;

namespace {

struct Cluster {
  fs::path dir;
  std::string env;    // "SLURM_CONF=... " for every command
  std::string error;  // why it did not start
};

Cluster& cluster() {
  static Cluster c;
  return c;
}

class SlurmCluster : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    Cluster& c = cluster();
    c.dir = temp_dir("slurm-cluster");
    // The script picks free ports of its own (and others if slurmctld finds one taken).
    auto r = run_command(std::string("bash ") + AISCALE_SLURM_CLUSTER_SCRIPT + " start " +
                         c.dir.string() + " debug");
    if (r.exit_code != 0) {
      c.error = "the test cluster did not start (tests/slurm/local_cluster.sh): " + r.output;
      return;
    }
    c.env = "env SLURM_CONF=" + (c.dir / "slurm.conf").string() + " ";
  }
  static void TearDownTestSuite() {
    run_command(std::string("bash ") + AISCALE_SLURM_CLUSTER_SCRIPT + " stop " + cluster().dir.string());
  }
  void SetUp() override { ASSERT_TRUE(cluster().error.empty()) << cluster().error; }
};

RunOutput aiscale_in_cluster(const std::string& args) {
  return run_command(cluster().env + std::string(AISCALE_BINARY) + " " + args);
}

}  // namespace

TEST_F(SlurmCluster, CpuStudyOfOneAndTwoRanksRunsAsAChain) {
  // A weak-scaling study of the language benchmark on 1 and 2 CPU ranks, submitted by
  // `aiscale scale --scheduler slurm`, waited for, collected, analysed and reported.
  const fs::path dir = cluster().dir / "work";
  fs::create_directories(dir);
  std::ofstream(dir / "weak.toml") << "name = \"slurm-weak\"\nkind = \"weak\"\ncounts = [1, 2]\n"
                                      "threads_per_rank = 1\n"
                                      "[workload]\ntype = \"bench\"\nsuite = \"language\"\n"
                                      "options = [\"--model\", \"gpt-tiny\", \"--seq\", \"16\"]\n"
                                      "batch = 2\n[measure]\nsteps = [2, 6]\n";
  const fs::path study = dir / "study";
  const std::string submit = "scale " + (dir / "weak.toml").string() + " -o " + study.string() +
                             " --scheduler slurm --partition debug --tasks-per-node 2 --time 5";
  // CPU ranks all on the one node; srun starts them, MPI meets through PMIx.
  auto r = aiscale_in_cluster(submit + " --signal-lead 30");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("n1-fp32-r1: job "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("n2-fp32-r1: job "), std::string::npos) << r.output;
  ASSERT_TRUE(fs::exists(study / "slurm.json"));

  // Submitting again while they are queued or running submits nothing.
  r = aiscale_in_cluster(submit);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("n1-fp32-r1: not submitted: job"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("n2-fp32-r1: job"), std::string::npos) << r.output;

  r = aiscale_in_cluster("slurm status " + study.string() + " --wait --timeout 240 --poll-max 3");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("COMPLETED"), std::string::npos) << r.output;
  for (int n : {1, 2}) {
    const fs::path p = study / "points" / ("n" + std::to_string(n) + "-fp32-r1");
    const std::string log = read_bytes(p / "log.txt");
    // The benchmark's record: n ranks, meeting through MPI (PMIx) when there are two.
    EXPECT_NE(log.find("\"world_size\":" + std::to_string(n)), std::string::npos) << log;
    if (n == 2) {
      EXPECT_NE(log.find("\"communicator\":\"mpi\""), std::string::npos) << log;
    }
    EXPECT_NE(log.find("aiscale-slurm: exit status 0"), std::string::npos) << log;
    EXPECT_EQ(read_bytes(p / "exit_code"), "0\n") << log;
    ASSERT_TRUE(fs::is_directory(p / "run")) << log;
  }

  r = aiscale_in_cluster("slurm collect " + study.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto rec = nlohmann::json::parse(read_bytes(study / "slurm.json"));
  for (const char* id : {"n1-fp32-r1", "n2-fp32-r1"}) {
    EXPECT_EQ(rec["points"][id].back()["state"], "COMPLETED") << rec.dump(2);
    EXPECT_EQ(rec["points"][id].back()["exit_code"], "0:0") << rec.dump(2);
  }
  const auto index = nlohmann::json::parse(read_bytes(study / "study.json"));
  for (const auto& p : index["points"]) EXPECT_EQ(p["state"], "finished") << index.dump(2);

  // Analysed from the points' files, then reported.
  r = aiscale_in_cluster("scale --analyze " + study.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto a = nlohmann::json::parse(read_bytes(study / "analysis.json"));
  ASSERT_EQ(a["series"][0]["points"].size(), 2u) << a.dump(2);
  EXPECT_GT(a["series"][0]["points"][1]["throughput_per_device"]["median"].get<double>(), 0.0);
  r = aiscale_in_cluster("report " + study.string() + " -o " + (dir / "report.html").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_GT(fs::file_size(dir / "report.html"), 100000u) << r.output;  // the charting code is inlined

  // Everything finished: nothing to submit.
  r = aiscale_in_cluster(submit);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("0 point(s) submitted"), std::string::npos) << r.output;
}

TEST_F(SlurmCluster, AFailingPointIsReportedWithItsLogAndNotWaitedFor) {
  const fs::path study = cluster().dir / "failing";
  fs::create_directories(study / "points/bad");
  std::ofstream(study / "points/bad/command.json")
      << "{\"ranks\": 1, \"argv\": [\"train\", \"--config\", \"/nonexistent/config.toml\"]}";
  auto r = aiscale_in_cluster("slurm submit " + study.string() + " --partition debug --time 3");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = aiscale_in_cluster("slurm status " + study.string() + " --wait --timeout 120 --poll-max 2");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("bad (job "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("died: FAILED"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("/nonexistent/config.toml"), std::string::npos) << r.output;  // log tail
}

TEST_F(SlurmCluster, SbatchRefusingAJobLeavesTheStudyAsItWas) {
  const fs::path study = cluster().dir / "refused";
  fs::create_directories(study / "points/p");
  std::ofstream(study / "points/p/command.json") << "{\"ranks\": 1, \"argv\": [\"train\"]}";
  auto r = aiscale_in_cluster("slurm submit " + study.string() + " --partition nosuchpartition");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("sbatch refused the job of point p"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("invalid partition"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(study / "slurm.json"));
}

TEST_F(SlurmCluster, TrainStudyRunsItsTrialsAsJobSteps) {
  // The quick-start search of tests/tune/tune_train_mpitest.cpp inside one allocation of 2
  // tasks: the study runs once in the batch script (slurm script --launcher none) and starts
  // each trial as an srun job step, two at a time, stopping the weaker ones early.
  const fs::path dir = cluster().dir / "tune";
  fs::create_directories(dir);
  const std::string study = quickstart_lr_study(dir);
  const fs::path script = dir / "tune.sbatch";
  auto r = aiscale_in_cluster("slurm script --partition debug -N 1 --tasks-per-node 2 -c 1 --launcher none "
                              "--no-exclusive --time 10 --signal-lead 30 --chdir " + dir.string() + " --output " +
                              (dir / "job.out").string() + " -o " + script.string() + " -- tune " + study);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_command(cluster().env + "timeout 400 sbatch --wait " + script.string());
  const std::string job = fs::exists(dir / "job.out") ? read_bytes(dir / "job.out") : "";
  ASSERT_EQ(r.exit_code, 0) << r.output << job << read_bytes(script);
  EXPECT_NE(job.find("aiscale-slurm: exit status 0"), std::string::npos) << job;
  EXPECT_NE(job.find("Slurm job steps"), std::string::npos) << job;
  EXPECT_NE(job.find("better than the default"), std::string::npos) << job;
  const auto results = nlohmann::json::parse(read_bytes(dir / "out/results.json"));
  EXPECT_EQ(results["launcher"], "srun");
  EXPECT_EQ(results["parallel_trials"], 2);
  ASSERT_EQ(results["trials"].size(), 13u);
  int64_t stopped = 0;
  for (const auto& t : results["trials"]) {
    const std::string status = t["status"];
    EXPECT_TRUE(status == "finished" || status == "stopped") << t.dump();
    stopped += status == "stopped";
    // Each trial ran as a job step of the allocation.
    const std::string log = read_bytes(dir / "out/trials" / (t["name"].get<std::string>() + ".log"));
    EXPECT_EQ(log.rfind("$ srun --exact --ntasks=1 --cpus-per-task=1", 0), 0u) << log;
  }
  EXPECT_GE(stopped, 6);
  EXPECT_TRUE(results["best"].is_string()) << results.dump(1);
}

TEST_F(SlurmCluster, LeonardoScriptOnFourNodesPassesSbatchTestOnly) {
  const fs::path script = cluster().dir / "leonardo.sbatch";
  auto r = aiscale_in_cluster("slurm script --system leonardo --nodes 4 --partition gpusite --account test "
                              "--time 02:00:00 -o " + script.string() + " -- train --config my.toml");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_command(cluster().env + "sbatch --test-only " + script.string());
  EXPECT_EQ(r.exit_code, 0) << r.output << read_bytes(script);
  EXPECT_NE(r.output.find("on nodes gpusite[1-4]"), std::string::npos) << r.output;
  // Five nodes do not exist there: sbatch's refusal is what the user sees.
  r = aiscale_in_cluster("slurm script --system leonardo --nodes 5 --partition gpusite -o " +
                         script.string() + " -- train --config my.toml");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_command(cluster().env + "sbatch --test-only " + script.string());
  EXPECT_NE(r.exit_code, 0) << r.output;
}
