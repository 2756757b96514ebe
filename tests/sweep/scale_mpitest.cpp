// `aiscale scale` end to end on the CPU: a strong study of a training (1 and 2 ranks, the
// 2nd of 3 epochs measured) and a weak study of the language benchmark, each point run
// through mpirun; the analysis fields are checked, the strong study's HTML report (with its
// step split, a reference check and the planner's prediction of each point) is opened in
// headless Chromium, and a second run skips finished points.
#include <gtest/gtest.h>

#include <fstream>

#include "aiscale/sweep/point_processes.h"
#include "aiscale/sweep/statistics.h"
#include "../support/background.h"
#include "../support/chromium.h"
#include "../support/run_support.h"

namespace {
namespace fs = std::filesystem;
using aiscale::testsupport::run_aiscale;

nlohmann::json read_json(const fs::path& p) { return nlohmann::json::parse(aiscale::testsupport::read_bytes(p)); }

TEST(ScaleStudyMpi, StrongTrainingStudyOverEpochs) {
  auto dir = aiscale::testsupport::temp_dir("scale-strong");
  // 3000 tokens: 93 windows of 32; a global batch of 8: 11 steps per epoch.
  aiscale::testsupport::write_byte_shards(dir, 3000, 2000);
  const std::string cfg = aiscale::testsupport::tiny_config(dir);
  std::ofstream(dir / "strong.toml") << "name = \"tiny-strong\"\nkind = \"strong\"\ncounts = [1, 2]\n"
                                        "threads_per_rank = 1\n"
                                        "[workload]\ntype = \"train\"\nconfig = \"" << cfg << "\"\n"
                                        "global_batch = 8\n[measure]\nepoch = 2\nepochs = 3\n";
  const std::string out = (dir / "study").string();
  // Rank 1 waits 20 ms before every backward pass: a straggler.
  auto r = run_aiscale("scale " + (dir / "strong.toml").string() + " -o " + out, "AISCALE_FAULT=slow@1:20");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("[2/2] n2-fp32-r1: finished"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("straggler: rank 1"), std::string::npos) << r.output;
  auto index = read_json(dir / "study/study.json");
  for (const auto& p : index["points"]) EXPECT_EQ(p["state"], "finished") << p.dump();
  auto cmd = read_json(dir / "study/points/n2-fp32-r1/command.json");
  EXPECT_EQ(cmd["ranks"], 2);

  // Every rank's steps, 3 epochs of 11 steps, the epoch records.
  auto rec = aiscale::sweep::read_step_records(out + "/points/n2-fp32-r1/run/steps.jsonl");
  EXPECT_EQ(rec.world, 2);
  EXPECT_EQ(rec.steps.size(), 2u * 33u);
  ASSERT_EQ(rec.epochs.size(), 3u);
  EXPECT_TRUE(rec.epochs[1].complete);
  EXPECT_EQ(rec.epochs[1].first_step, 12);
  EXPECT_EQ(rec.epochs[1].last_step, 22);
  EXPECT_GT(rec.epochs[1].val_s, 0);  // one validation pass per epoch

  auto a = read_json(dir / "study/analysis.json");
  EXPECT_EQ(a["study"]["kind"], "strong");
  ASSERT_EQ(a["series"].size(), 1u);
  const auto& pts = a["series"][0]["points"];
  ASSERT_EQ(pts.size(), 2u);
  const double t1 = pts[0]["step_time_median_s"], t2 = pts[1]["step_time_median_s"];
  EXPECT_DOUBLE_EQ(pts[0]["speedup"].get<double>(), 1.0);
  EXPECT_NEAR(pts[1]["speedup"].get<double>(), t1 / t2, 1e-12);
  EXPECT_NEAR(pts[1]["efficiency"].get<double>(), t1 / t2 / 2, 1e-12);
  // Strong: each of 2 ranks processes half the global batch per step.
  EXPECT_NEAR(pts[1]["throughput_per_device"]["median"].get<double>(), 4 * 32 / t2, 1e-6);
  EXPECT_GT(pts[0]["tflops_per_device"]["median"].get<double>(), 0);
  EXPECT_TRUE(a["series"][0]["amdahl"].is_object());
  // The measured epoch's 11 steps less its first and last batch.
  ASSERT_EQ(a["cdf"].size(), 2u);
  EXPECT_EQ(a["cdf"][0]["step_times_s"].size(), 9u);
  EXPECT_EQ(a["loss_curves"][1]["loss"].size(), 33u);
  EXPECT_TRUE(a["failed_points"].empty());
  EXPECT_TRUE(pts[0]["stragglers"].empty());
  ASSERT_EQ(pts[1]["stragglers"].size(), 1u) << pts[1].dump();
  EXPECT_EQ(pts[1]["stragglers"][0]["rank"], 1);
  EXPECT_GT(pts[1]["stragglers"][0]["slower_by"].get<double>(), 0.05);

  // A reference value the study meets whatever the machine (the straggler makes the speedup
  // of 2 ranks anything from 0.1 to 1), kept with it and checked at every analysis.
  std::ofstream(dir / "ref.toml") << "[[reference]]\nn = 2\nmetric = \"speedup\"\nvalue = 1.0\nlower = -1.0\nupper = 100.0\n";
  r = run_aiscale("scale --analyze " + out + " --reference " + (dir / "ref.toml").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Its report with the planner's prediction of each point on the development VM's
  // description (the planner's own CPU fixture and its measured calibration), opened in
  // headless Chromium: every chart drawn, no script or console error.
  const std::string fixtures = std::string(AISCALE_SOURCE_DIR) + "/tests/plan/fixtures/";
  r = run_aiscale("report " + out + " -o " + (dir / "report.html").string() + " --predict devvm/cpu --systems " +
                  fixtures + "devvm_cpu.toml --calibration " + fixtures + "devvm_cpu_measured.jsonl");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string html = aiscale::testsupport::read_bytes(dir / "report.html");
  for (const char* table : {"Measured against the planner", "Reference checks", "step split (ms)"})
    EXPECT_NE(html.find(table), std::string::npos) << table;
  r = run_aiscale("report " + out + " -o " + (dir / "report.md").string() + " --predict devvm/cpu --systems " +
                  fixtures + "devvm_cpu.toml --calibration " + fixtures + "devvm_cpu_measured.jsonl");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string md = aiscale::testsupport::read_bytes(dir / "report.md");
  // Both points predicted on devvm/cpu, each with the measurement over the prediction.
  EXPECT_NE(md.find("| tiny-strong | aiscale fp32 | 1 | devvm/cpu |"), std::string::npos) << md;
  EXPECT_NE(md.find("| tiny-strong | aiscale fp32 | 2 | devvm/cpu |"), std::string::npos) << md;
  EXPECT_EQ(md.find("the point's run directory holds no"), std::string::npos) << md;
  const auto view = aiscale::testsupport::open_in_chromium(dir / "report.html", dir);
  EXPECT_EQ(view.status.count("done") ? view.status.at("done") : "", "true") << view.log;
  ASSERT_TRUE(view.status.count("charts") && view.status.count("rendered")) << view.log;
  EXPECT_EQ(view.status.at("rendered"), view.status.at("charts")) << view.status.at("text");
  EXPECT_EQ(view.status.at("errors"), "0") << view.status.at("text");
  for (const char* id : {"efficiency", "speedup", "cdf", "throughput", "prediction", "split", "loss"})
    EXPECT_TRUE(aiscale::testsupport::chart_drawn(view.dom, id)) << id << " has no <svg> or <canvas>";

  // Again: nothing is run.
  r = run_aiscale("scale " + (dir / "strong.toml").string() + " -o " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("0 point(s) finished, 0 failed, 2 skipped"), std::string::npos) << r.output;
}

TEST(ScaleStudyMpi, WeakBenchStudyAndAFailedPoint) {
  auto dir = aiscale::testsupport::temp_dir("scale-weak");
  std::ofstream(dir / "weak.toml") << "name = \"tiny-weak\"\nkind = \"weak\"\ncounts = [1, 2]\n"
                                      "threads_per_rank = 1\n"
                                      "[workload]\ntype = \"bench\"\nsuite = \"language\"\n"
                                      "options = [\"--model\", \"gpt-tiny\", \"--seq\", \"16\"]\n"
                                      "batch = 2\n[measure]\nsteps = [2, 6]\n";
  const std::string out = (dir / "study").string();
  auto r = run_aiscale("scale " + (dir / "weak.toml").string() + " -o " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto a = read_json(dir / "study/analysis.json");
  EXPECT_EQ(a["study"]["kind"], "weak");
  const auto& pts = a["series"][0]["points"];
  ASSERT_EQ(pts.size(), 2u);
  const double d1 = pts[0]["throughput_per_device"]["median"], d2 = pts[1]["throughput_per_device"]["median"];
  EXPECT_NEAR(pts[1]["efficiency"].get<double>(), d2 / d1, 1e-12);
  EXPECT_NEAR(pts[1]["weak_efficiency"]["median_batch"].get<double>(), d2 / d1, 1e-12);
  EXPECT_TRUE(pts[1]["weak_efficiency"]["epoch"].is_null());  // synthetic tokens: no epochs
  EXPECT_NEAR(pts[1]["speedup"].get<double>(), 2 * d2 / d1, 1e-12);
  EXPECT_EQ(a["cdf"][1]["step_times_s"].size(), 5u);  // steps 2..6

  // A point whose job fails (here its launcher, for one rank) is recorded with its reason
  // and the study goes on.
  fs::remove_all(dir / "study/points/n1-fp32-r1/run");
  fs::remove(dir / "study/points/n1-fp32-r1/exit_code");
  std::ofstream(dir / "mpirun.sh") << "#!/bin/sh\nif [ \"$2\" = 1 ]; then echo simulated launch failure >&2; "
                                      "exit 3; fi\nexec mpirun \"$@\"\n";
  fs::permissions(dir / "mpirun.sh", fs::perms::owner_all);
  r = run_aiscale("scale " + (dir / "weak.toml").string() + " -o " + out + " --mpirun " + (dir / "mpirun.sh").string());
  // The exit status says a point failed, and one line names it and where its log is.
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("0 point(s) finished, 1 failed, 1 skipped"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("1 of 2 point(s) failed (n1-fp32-r1): their logs are " + out +
                          "/points/<id>/log.txt"), std::string::npos) << r.output;
  auto index = read_json(dir / "study/study.json");
  EXPECT_EQ(index["points"][0]["state"], "failed");
  const std::string reason = index["points"][0]["reason"];
  EXPECT_NE(reason.find("exit code 3"), std::string::npos) << reason;
  EXPECT_NE(reason.find("simulated launch failure"), std::string::npos) << reason;
  EXPECT_EQ(read_json(dir / "study/analysis.json")["failed_points"][0]["id"], "n1-fp32-r1");
}

// A real SIGTERM to `aiscale scale` while a 2-rank training point runs (mpirun and its
// ranks, each rank in a process group of its own): the ranks are ended with it, the point is
// recorded as interrupted, the exit status is 128 + 15; the rerun skips the finished point
// and runs the interrupted one to the end.
TEST(ScaleStudyMpi, SigtermStopsTheRunningPointAndARerunResumes) {
  auto dir = aiscale::testsupport::temp_dir("scale-sigterm");
  aiscale::testsupport::write_byte_shards(dir, 3000, 2000);
  const std::string cfg = aiscale::testsupport::tiny_config(dir);
  std::ofstream(dir / "weak.toml") << "name = \"tiny-stop\"\nkind = \"weak\"\ncounts = [1, 2]\n"
                                      "threads_per_rank = 1\n"
                                      "[workload]\ntype = \"train\"\nconfig = \"" << cfg << "\"\n"
                                      "batch = 2\n[measure]\nsteps = [2, 6]\n";
  const fs::path study = dir / "study";
  const std::string n2 = (fs::absolute(study).lexically_normal() / "points/n2-fp32-r1").string();
  // Rank 1 (only the 2-rank point has one) waits 2 s before every backward pass.
  const pid_t pid = aiscale::testsupport::start_aiscale(
      {"scale", (dir / "weak.toml").string(), "-o", study.string()}, dir / "out.txt",
      {{"AISCALE_FAULT", "slow@1:2000"}});
  // mpirun and both ranks are up.
  ASSERT_TRUE(aiscale::testsupport::wait_until(
      [&] { return aiscale::sweep::find_point_processes(n2).size() >= 3; }, 120))
      << aiscale::testsupport::read_bytes(dir / "out.txt");
  ::kill(pid, SIGTERM);
  const int code = aiscale::testsupport::wait_exit(pid, 120);
  const std::string out = aiscale::testsupport::read_bytes(dir / "out.txt");
  EXPECT_EQ(code, 128 + SIGTERM) << out;
  EXPECT_NE(out.find("point n2-fp32-r1 was ended and is recorded as interrupted"), std::string::npos) << out;
  EXPECT_TRUE(aiscale::sweep::find_point_processes(n2).empty());
  auto index = read_json(study / "study.json");
  EXPECT_EQ(index["points"][0]["state"], "finished");
  EXPECT_EQ(index["points"][1]["state"], "interrupted");

  auto r = run_aiscale("scale " + (dir / "weak.toml").string() + " -o " + study.string());
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("[1/2] n1-fp32-r1: finished before, skipped"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("1 point(s) finished, 0 failed, 1 skipped"), std::string::npos) << r.output;
  index = read_json(study / "study.json");
  EXPECT_EQ(index["points"][1]["state"], "finished");
}

}  // namespace
