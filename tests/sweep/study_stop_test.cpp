// `aiscale scale` and the processes of its points, with shell scripts in place of mpirun (no
// MPI needed): a real SIGTERM to a running study ends the point's processes (SIGKILL after
// --stop-timeout for those that ignore it), records the point as interrupted and exits
// 128 + 15; processes that outlive mpirun are ended; a rerun refuses while processes of the
// study's points are alive or another `aiscale scale` holds the study; a study whose points
// failed exits 1 with one line naming them and their logs.
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <fstream>

#include <gtest/gtest.h>

#include "aiscale/sweep/point_processes.h"
#include "../support/background.h"
#include "../support/run_support.h"

namespace aiscale::sweep {
namespace {
namespace fs = std::filesystem;
using testsupport::read_bytes;
using testsupport::run_aiscale;
using testsupport::start_aiscale;
using testsupport::wait_exit;
using testsupport::wait_until;

const char* kStudy = R"(name = "stop"
kind = "weak"
counts = [1, 2]
threads_per_rank = 1
[workload]
type = "bench"
suite = "language"
options = ["--model", "gpt-tiny", "--seq", "16"]
batch = 2
[measure]
steps = [2, 4]
)";

std::string script(const fs::path& dir, const std::string& name, const std::string& body) {
  const fs::path p = dir / name;
  std::ofstream(p) << "#!/bin/sh\n" << body;
  fs::permissions(p, fs::perms::owner_all);
  return p.string();
}

std::string points_of(const fs::path& study) {
  return (fs::absolute(study).lexically_normal() / "points").string() + "/";
}

nlohmann::json index_of(const fs::path& study) {
  return nlohmann::json::parse(read_bytes(study / "study.json"));
}

TEST(ScaleStop, SigtermEndsThePointsProcessesRecordsItInterruptedAndExitsNonZero) {
  auto dir = testsupport::temp_dir("scale-stop");
  std::ofstream(dir / "s.toml") << kStudy;
  // An mpirun that ignores SIGTERM, and so does the process it starts: only SIGKILL ends them.
  const std::string mpirun = script(dir, "stubborn.sh",
                                    "trap '' TERM INT\nsleep 1000 &\necho up > \"$AISCALE_STUDY_POINT/up\"\nwait\n");
  const fs::path study = dir / "study";
  const pid_t pid = start_aiscale({"scale", (dir / "s.toml").string(), "-o", study.string(), "--mpirun",
                                   mpirun, "--stop-timeout", "1"}, dir / "out.txt");
  ASSERT_TRUE(wait_until([&] { return fs::exists(study / "points/n1-fp32-r1/up"); }, 30))
      << read_bytes(dir / "out.txt");
  ASSERT_EQ(find_point_processes(points_of(study)).size(), 2u);  // the script and its sleep
  ::kill(pid, SIGTERM);
  const int code = wait_exit(pid, 30);
  const std::string out = read_bytes(dir / "out.txt");
  EXPECT_EQ(code, 128 + SIGTERM) << out;
  EXPECT_NE(out.find("stopped by SIGTERM: point n1-fp32-r1 was ended and is recorded as interrupted"),
            std::string::npos) << out;
  EXPECT_TRUE(find_point_processes(points_of(study)).empty());
  const auto index = index_of(study);
  EXPECT_EQ(index["points"][0]["state"], "interrupted");
  EXPECT_EQ(index["points"][1]["state"], "pending");  // the study stopped there
  EXPECT_EQ(read_bytes(study / "points/n1-fp32-r1/interrupted"), "SIGTERM\n");
  const std::string log = read_bytes(study / "points/n1-fp32-r1/log.txt");
  EXPECT_NE(log.find("SIGTERM received: passed on to the point's processes"), std::string::npos) << log;
  EXPECT_NE(log.find("did not end in time: killed (SIGKILL)"), std::string::npos) << log;

  // A rerun runs the interrupted point again (here its mpirun fails at once).
  const std::string failing = script(dir, "failing.sh", "echo simulated launch failure >&2\nexit 3\n");
  auto r = run_aiscale("scale " + (dir / "s.toml").string() + " -o " + study.string() + " --mpirun " + failing);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("[1/2] n1-fp32-r1 (1 rank(s)): running"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(study / "points/n1-fp32-r1/interrupted"));
}

TEST(ScaleStop, ProcessesThatOutliveMpirunAreEndedBeforeTheNextPoint) {
  auto dir = testsupport::temp_dir("scale-leftover");
  std::ofstream(dir / "s.toml") << kStudy;
  // An mpirun that leaves a process behind in a session of its own, and exits.
  const std::string mpirun = script(dir, "leaves.sh", "setsid sleep 1000 </dev/null >/dev/null 2>&1 &\nexit 0\n");
  const fs::path study = dir / "study";
  auto r = run_aiscale("scale " + (dir / "s.toml").string() + " -o " + study.string() + " --mpirun " +
                       mpirun + " --stop-timeout 5");
  EXPECT_TRUE(find_point_processes(points_of(study)).empty());
  const std::string log = read_bytes(study / "points/n1-fp32-r1/log.txt");
  EXPECT_NE(log.find("1 process(es) of the point were still running after mpirun ended: ended them"),
            std::string::npos) << log;
  // Without results both points failed: the exit status and one line say so.
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("2 of 2 point(s) failed (n1-fp32-r1, n2-fp32-r1): their logs are " +
                          study.string() + "/points/<id>/log.txt"), std::string::npos) << r.output;
}

TEST(ScaleStop, ARerunRefusesBesideProcessesOfAnEarlierRunOrAnotherScale) {
  auto dir = testsupport::temp_dir("scale-beside");
  std::ofstream(dir / "s.toml") << kStudy;
  const fs::path study = dir / "study";
  ASSERT_EQ(run_aiscale("scale " + (dir / "s.toml").string() + " -o " + study.string() + " --dry-run").exit_code, 0);
  const std::string failing = script(dir, "failing.sh", "exit 3\n");
  const std::string cmd = "scale " + (dir / "s.toml").string() + " -o " + study.string() + " --mpirun " + failing;

  // A process of point n2-fp32-r1 left by an earlier run.
  const std::string marker = points_of(study) + "n2-fp32-r1";
  const pid_t left = ::fork();
  if (left == 0) {
    ::setenv(kPointEnv, marker.c_str(), 1);
    ::execlp("sleep", "sleep", "1000", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ASSERT_TRUE(wait_until([&] { return !find_point_processes(marker).empty(); }, 10));
  const std::string before = read_bytes(study / "study.json");
  auto r = run_aiscale(cmd);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("point n2-fp32-r1 of study '" + study.string() + "' still has 1 process(es) "
                          "running from an earlier run: " + std::to_string(left) + " (sleep 1000)"),
            std::string::npos) << r.output;
  EXPECT_NE(r.output.find("kill " + std::to_string(left)), std::string::npos) << r.output;
  EXPECT_EQ(read_bytes(study / "study.json"), before);  // nothing ran, nothing rewritten
  ::kill(left, SIGKILL);
  ::waitpid(left, nullptr, 0);

  // Another `aiscale scale` holding the study.
  const int fd = ::open((study / "scale.lock").c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);
  ASSERT_EQ(::ftruncate(fd, 0), 0);
  ASSERT_EQ(::write(fd, "4242", 4), 4);
  r = run_aiscale(cmd);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("another `aiscale scale` (pid 4242) is running the points of study"),
            std::string::npos) << r.output;
  ::close(fd);

  // Neither: the points run (and fail, with this mpirun).
  r = run_aiscale(cmd);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("0 point(s) finished, 2 failed"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace aiscale::sweep
