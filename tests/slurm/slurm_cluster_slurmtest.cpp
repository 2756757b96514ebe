// aiscale against a real Slurm: tests/slurm/local_cluster.sh starts munged, slurmctld and
// slurmd (Debian's packages) on this machine with a configuration in a temporary folder;
// a study of a 1-rank and a 2-rank CPU training is submitted as a chain, waited for,
// collected; a site script is checked with sbatch --test-only; the daemons are stopped by
// their PIDs at the end, also when a test fails. Needs root. If the daemons cannot start,
// every test fails with the reason.
#include <gtest/gtest.h>

#include <unistd.h>

#include <fstream>

#include "../support/run_helpers.h"

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
    // Ports of their own, so that a cluster of another test run does not answer.
    const int port = 20000 + static_cast<int>(::getpid() % 4000) * 8;
    const std::string ports = "AISCALE_TEST_SLURMCTLD_PORT=" + std::to_string(port) +
                              " AISCALE_TEST_SLURMD_PORT=" + std::to_string(port + 1);
    auto r = run_command("env " + ports + " bash " + AISCALE_SLURM_CLUSTER_SCRIPT + " start " +
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
  const fs::path dir = cluster().dir / "work";
  fs::create_directories(dir);
  write_byte_shards(dir);
  const std::string config = tiny_config(dir);
  const fs::path study = dir / "study";
  for (int n : {1, 2}) {
    const fs::path p = study / "points" / ("n" + std::to_string(n));
    fs::create_directories(p);
    std::ofstream(p / "command.json")
        << "{\"ranks\": " << n << ", \"argv\": [\"train\", \"--config\", \"" << config
        << "\", \"-q\", \"--set\", \"train.steps=4\", \"run.dir=" << (p / "run").string() << "\"]}";
  }
  // CPU ranks all on the one node; srun starts them, MPI meets through PMIx.
  auto r = aiscale_in_cluster("slurm submit " + study.string() +
                              " --partition debug --tasks-per-node 2 --time 5 --signal-lead 30");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("n1: job "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("n2: job "), std::string::npos) << r.output;
  ASSERT_TRUE(fs::exists(study / "slurm.json"));

  // Submitting again while they are queued or running submits nothing.
  r = aiscale_in_cluster("slurm submit " + study.string() + " --partition debug --tasks-per-node 2 --time 5");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("n1: not submitted: job"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("n2: job"), std::string::npos) << r.output;

  r = aiscale_in_cluster("slurm status " + study.string() + " --wait --timeout 240 --poll-max 3");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("COMPLETED"), std::string::npos) << r.output;
  for (int n : {1, 2}) {
    const fs::path p = study / "points" / ("n" + std::to_string(n));
    const std::string log = read_bytes(p / "log.txt");
    EXPECT_NE(log.find(std::to_string(n) + " rank(s) [" + (n == 1 ? "none" : "mpi")), std::string::npos) << log;
    EXPECT_NE(log.find("aiscale-slurm: exit status 0"), std::string::npos) << log;
    ASSERT_TRUE(fs::is_directory(p / "run")) << log;
  }

  r = aiscale_in_cluster("slurm collect " + study.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto rec = nlohmann::json::parse(read_bytes(study / "slurm.json"));
  for (const char* id : {"n1", "n2"}) {
    EXPECT_EQ(rec["points"][id].back()["state"], "COMPLETED") << rec.dump(2);
    EXPECT_EQ(rec["points"][id].back()["exit_code"], "0:0") << rec.dump(2);
  }
  // Everything finished: nothing to submit.
  r = aiscale_in_cluster("slurm submit " + study.string() + " --partition debug --tasks-per-node 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("nothing to submit"), std::string::npos) << r.output;
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
