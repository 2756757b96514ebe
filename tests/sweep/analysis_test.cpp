// analyze_study, refresh_point_states and analyze_jsonl on a study directory written by
// hand with fixed step times, so every figure can be checked against a hand calculation.
#include <gtest/gtest.h>

#include <fstream>

#include "aiscale/core/error.h"
#include "aiscale/sweep/analysis.h"
#include "aiscale/sweep/reference_check.h"
#include "aiscale/sweep/study_dir.h"
#include "../support/run_support.h"

namespace aiscale::sweep {
namespace {
namespace fs = std::filesystem;

void write_point(const fs::path& study, const std::string& id, int ranks,
                 const std::vector<std::vector<double>>& times_by_rank, int64_t tokens, int exit_code) {
  const fs::path pd = study / "points" / id;
  fs::create_directories(pd / "run");
  std::ofstream(pd / "command.json") << nlohmann::json{{"ranks", ranks}, {"argv", {"bench", "language"}}}.dump();
  std::ofstream(pd / "log.txt") << "starting\nboom: something broke\n";
  std::ofstream(pd / "exit_code") << exit_code << "\n";
  if (exit_code != 0) return;
  std::ofstream steps(pd / "run" / "steps.jsonl");
  for (size_t s = 0; s < times_by_rank[0].size(); ++s)
    for (int r = 0; r < ranks; ++r)
      steps << nlohmann::json{{"rank", r}, {"step", s + 1}, {"epoch", 0}, {"step_time_s", times_by_rank[r][s]},
                              {"data_wait_s", 0.05}, {"sync_s", r == 0 ? 0.25 : 0.0}, {"tokens", tokens},
                              {"samples", tokens / 100},
                              {"loss", 5.0 - 0.5 * s}, {"first_in_epoch", s == 0}, {"last_in_epoch", false},
                              {"warmup", s == 0}}.dump()
            << "\n";
  for (int r = 0; r < ranks; ++r)
    steps << nlohmann::json{{"event", "memory"}, {"rank", r}, {"peak_memory_bytes", 1000.0 + r}}.dump() << "\n";
  std::ofstream(pd / "run" / "bench.jsonl") << nlohmann::json{{"flops_per_token", 1e6}, {"device", "Test CPU"}}.dump() << "\n";
}

fs::path make_study(const std::string& name) {
  fs::path dir = testsupport::temp_dir(name);
  nlohmann::json points = nlohmann::json::array();
  for (int n : {1, 2, 4})
    points.push_back({{"id", fmt::format("n{}-fp32-r1", n)}, {"ranks", n}, {"precision", "fp32"}, {"repeat", 1},
                      {"state", "pending"}, {"reason", ""}, {"dir", fmt::format("points/n{}-fp32-r1", n)}});
  nlohmann::json index = {{"format", "aiscale-study"}, {"version", 1}, {"name", "hand"}, {"study_id", "0123"},
                          {"kind", "strong"}, {"counts", {1, 2, 4}}, {"precisions", {"fp32"}}, {"repeats", 1},
                          {"device", "cpu"}, {"workload_text", "bench language"},
                          {"measure", {{"first_step", 1}, {"last_step", 100}, {"epoch", 0}, {"epochs", 0}}},
                          {"points", points}};
  std::ofstream(dir / "study.json") << index.dump(2);
  // n = 1: steps of 2.0 s after a warm-up step, 1000 tokens: 500 tokens/s.
  write_point(dir, "n1-fp32-r1", 1, {{9, 2.0, 2.0, 2.0}}, 1000, 0);
  // n = 2: the slower rank takes 1.25 s per step, 500 tokens per rank: 400 tokens/s.
  write_point(dir, "n2-fp32-r1", 2, {{9, 1.25, 1.25, 1.25}, {9, 1.0, 1.0, 1.0}}, 500, 0);
  write_point(dir, "n4-fp32-r1", 4, {}, 0, 3);
  return dir;
}

TEST(SweepAnalysis, StrongStudyFromFixedRecords) {
  const fs::path dir = make_study("analysis-strong");
  nlohmann::json a = analyze_study(dir.string());
  EXPECT_EQ(a["format"], "aiscale-study-analysis");
  EXPECT_TRUE(fs::exists(dir / "analysis.json"));
  ASSERT_EQ(a["series"].size(), 1u);
  const auto& s = a["series"][0];
  EXPECT_EQ(s["label"], "aiscale fp32");
  ASSERT_EQ(s["points"].size(), 2u);
  const auto& p1 = s["points"][0];
  const auto& p2 = s["points"][1];
  EXPECT_DOUBLE_EQ(p1["step_time_median_s"].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(p1["throughput_per_device"]["median"].get<double>(), 500.0);
  EXPECT_DOUBLE_EQ(p1["tflops_per_device"]["median"].get<double>(), 500.0 * 1e6 / 1e12);
  EXPECT_TRUE(p1["mfu"].is_null());  // a CPU: no known peak
  EXPECT_DOUBLE_EQ(p2["step_time_median_s"].get<double>(), 1.25);
  EXPECT_DOUBLE_EQ(p2["throughput_per_device"]["median"].get<double>(), 400.0);
  EXPECT_DOUBLE_EQ(p2["throughput_total"]["median"].get<double>(), 800.0);
  EXPECT_DOUBLE_EQ(p2["speedup"].get<double>(), 1.6);      // 2.0 / 1.25
  EXPECT_DOUBLE_EQ(p2["efficiency"].get<double>(), 0.8);   // 1.6 / 2
  EXPECT_DOUBLE_EQ(p2["peak_memory_bytes"].get<double>(), 1001.0);
  EXPECT_TRUE(p2["weak_efficiency"].is_null());
  // Where the step goes: the slowest rank's rows (rank 0), 0.05 s waiting for data, 0.25 s
  // in the all-reduces, the rest computing; the mean over the 3 measured steps.
  EXPECT_NEAR(p1["step_split"]["compute_s"].get<double>(), 1.7, 1e-12);
  EXPECT_NEAR(p2["step_split"]["compute_s"].get<double>(), 0.95, 1e-12);
  EXPECT_NEAR(p2["step_split"]["communication_s"].get<double>(), 0.25, 1e-12);
  EXPECT_NEAR(p2["step_split"]["data_wait_s"].get<double>(), 0.05, 1e-12);
  EXPECT_EQ(p2["step_split"]["steps"], 3);
  // T = a + b/n through (1, 2.0) and (2, 1.25): b = 1.5, a = 0.5, f = 0.25.
  EXPECT_NEAR(s["amdahl"]["serial_fraction"].get<double>(), 0.25, 1e-12);
  // Two rank counts determine the curve: no fit quality is claimed.
  EXPECT_TRUE(s["amdahl"]["residual_rms"].is_null());
  EXPECT_EQ(s["amdahl"]["rank_counts"], 2);
  EXPECT_NE(s["amdahl"]["note"].get<std::string>().find("no fit quality"), std::string::npos);
  // The CDF leaves out the warm-up step, which is also the epoch's first batch.
  ASSERT_EQ(a["cdf"].size(), 2u);
  EXPECT_EQ(a["cdf"][1]["step_times_s"], (std::vector<double>{1.25, 1.25, 1.25}));
  ASSERT_EQ(a["loss_curves"].size(), 2u);
  EXPECT_EQ(a["loss_curves"][0]["loss"], (std::vector<double>{5.0, 4.5, 4.0, 3.5}));
  ASSERT_EQ(a["failed_points"].size(), 1u);
  EXPECT_EQ(a["failed_points"][0]["id"], "n4-fp32-r1");
  const std::string reason = a["failed_points"][0]["reason"];
  EXPECT_NE(reason.find("exit code 3"), std::string::npos);
  EXPECT_NE(reason.find("boom"), std::string::npos);
  EXPECT_EQ(a["environment"]["device"], "Test CPU");
}

TEST(SweepAnalysis, RefreshReadsStatesFromFilesAlone) {
  const fs::path dir = make_study("analysis-refresh");
  nlohmann::json index = refresh_point_states(dir.string());
  EXPECT_EQ(index["points"][0]["state"], "finished");
  EXPECT_EQ(index["points"][1]["state"], "finished");
  EXPECT_EQ(index["points"][2]["state"], "failed");
  // Written back to study.json; a point without outputs is pending, with a log running.
  fs::remove(dir / "points/n4-fp32-r1/exit_code");
  EXPECT_EQ(refresh_point_states(dir.string())["points"][2]["state"], "running");
  fs::remove(dir / "points/n4-fp32-r1/log.txt");
  refresh_point_states(dir.string());
  EXPECT_EQ(read_study_index(dir.string())["points"][2]["state"], "pending");
  set_point_scheduler(dir.string(), "n4-fp32-r1", {{"slurm_job_id", "42"}});
  EXPECT_EQ(read_study_index(dir.string())["points"][2]["scheduler"]["slurm_job_id"], "42");
}

TEST(SweepAnalysis, CorruptIndexIsRefusedAndKept) {
  const fs::path dir = testsupport::temp_dir("analysis-corrupt");
  std::ofstream(dir / "study.json") << "{\"format\": \"aiscale-study\", \"points\": [";
  EXPECT_THROW(analyze_study(dir.string()), Error);
  EXPECT_THROW(refresh_point_states(dir.string()), Error);
  EXPECT_EQ(testsupport::read_bytes(dir / "study.json"), "{\"format\": \"aiscale-study\", \"points\": [");
}

TEST(SweepAnalysis, ComparisonJsonLines) {
  const fs::path dir = testsupport::temp_dir("analysis-jsonl");
  std::ofstream(dir / "pt.jsonl")
      << R"({"source":"pytorch","world_size":1,"precision":"bf16","tokens_per_s_per_device":100,"step_times_s":[2,1,3]})" "\n"
      << R"({"source":"pytorch","world_size":2,"precision":"bf16","tokens_per_s_per_device":90,"step_times_s":[1.1]})" "\n"
      << R"({"source":"pytorch","world_size":2,"precision":"bf16","tokens_per_s_per_device":80,"step_times_s":[1.2]})" "\n";
  nlohmann::json a = analyze_jsonl((dir / "pt.jsonl").string());
  ASSERT_EQ(a["series"].size(), 1u);
  const auto& s = a["series"][0];
  EXPECT_EQ(s["source"], "pytorch");
  EXPECT_EQ(s["label"], "pytorch bf16");
  ASSERT_EQ(s["points"].size(), 2u);
  EXPECT_EQ(s["points"][1]["repeats"], 2);
  // Median of 90 and 80 per device: 85; e(2) = 0.85, speedup 0.85 * 2.
  EXPECT_DOUBLE_EQ(s["points"][1]["throughput_per_device"]["median"].get<double>(), 85.0);
  EXPECT_DOUBLE_EQ(s["points"][1]["throughput_per_device"]["min"].get<double>(), 80.0);
  EXPECT_DOUBLE_EQ(s["points"][1]["efficiency"].get<double>(), 0.85);
  EXPECT_DOUBLE_EQ(s["points"][1]["speedup"].get<double>(), 1.7);
  EXPECT_EQ(a["cdf"][0]["step_times_s"], (std::vector<double>{1, 2, 3}));
  std::ofstream(dir / "bad.jsonl") << R"({"source":"pytorch","precision":"bf16"})" "\n";
  EXPECT_THROW(analyze_jsonl((dir / "bad.jsonl").string()), Error);
}


// Reference values kept with the study (reference.toml): every analysis checks them, with
// ReFrame's relative bounds; a point that was not measured fails, saying so.
namespace refs {

TEST(SweepReferences, EveryAnalysisChecksTheStudysReferenceValues) {
  const fs::path dir = make_study("analysis-references");
  // n = 1: 500 tokens/s per device; n = 2: 400 per device (the hand figures above).
  std::ofstream(dir / "reference.toml")
      << "[[reference]]\nn = 1\nmetric = \"throughput_per_device\"\nvalue = 490.0\nlower = -0.05\n"
         "[[reference]]\nn = 2\nmetric = \"throughput_per_device\"\nvalue = 450.0\nlower = -0.05\nupper = 0.05\n"
         "[[reference]]\nn = 2\nmetric = \"step_time_median_s\"\nvalue = 1.0\nupper = 0.1\n"
         "[[reference]]\nn = 4\nmetric = \"throughput_total\"\nvalue = 1000.0\nlower = -0.1\n";
  const nlohmann::json a = analyze_study(dir.string());
  ASSERT_TRUE(a.contains("references")) << a.dump();
  const nlohmann::json& r = a["references"];
  ASSERT_EQ(r.size(), 4u) << r.dump();
  EXPECT_TRUE(r[0]["pass"].get<bool>()) << r[0].dump();   // 500 >= 490 × 0.95
  EXPECT_FALSE(r[1]["pass"].get<bool>()) << r[1].dump();  // 400 < 450 × 0.95
  EXPECT_NE(r[1]["why"].get<std::string>().find("11.1 % below"), std::string::npos) << r[1].dump();
  EXPECT_FALSE(r[2]["pass"].get<bool>()) << r[2].dump();  // 1.25 s > 1.0 × 1.1
  EXPECT_NE(r[2]["why"].get<std::string>().find("25.0 % above"), std::string::npos) << r[2].dump();
  EXPECT_FALSE(r[3]["pass"].get<bool>());                 // n = 4 failed: not measured
  EXPECT_NE(r[3]["why"].get<std::string>().find("no point of 4 rank(s)"), std::string::npos) << r[3].dump();
}

// The command line: `aiscale scale --analyze DIR --reference FILE` keeps the file with the
// study, prints each check and ends with status 1 on a miss; `aiscale report` shows them.
TEST(SweepReferences, ScaleAnalyzeExitsOneOnAMissAndTheReportShowsIt) {
  const fs::path dir = make_study("references-cli");
  const fs::path file = dir.parent_path() / (dir.filename().string() + "-ref.toml");
  std::ofstream(file) << "[[reference]]\nn = 2\nmetric = \"throughput_per_device\"\nvalue = 450.0\nlower = -0.05\n";
  auto r = testsupport::run_aiscale("scale --analyze " + dir.string() + " --reference " + file.string());
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("reference aiscale fp32 n=2 throughput_per_device 450: FAIL"), std::string::npos) << r.output;
  // (The study's failed n = 4 point is the first reason named for the status.)
  EXPECT_TRUE(fs::exists(dir / "reference.toml"));
  r = testsupport::run_aiscale("report " + dir.string() + " -o " + (dir / "r.md").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string md = testsupport::read_bytes(dir / "r.md");
  EXPECT_NE(md.find("Reference checks"), std::string::npos) << md;
  EXPECT_NE(md.find("FAIL: 400 is 11.1 % below the reference"), std::string::npos) << md;
  fs::remove(file);
}

TEST(SweepReferences, BadReferenceFilesAreNamedWithTheFix) {
  const fs::path dir = testsupport::temp_dir("references-bad");
  auto error_for = [&](const std::string& text) {
    std::ofstream(dir / "r.toml") << text;
    try {
      load_references((dir / "r.toml").string());
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error_for("").find("no [[reference]] entry"), std::string::npos);
  EXPECT_NE(error_for("[[reference]]\nn = 2\nmetric = \"speed\"\nvalue = 1.0\nlower = -0.1\n").find("metric 'speed' is unknown"),
            std::string::npos);
  EXPECT_NE(error_for("[[reference]]\nn = 2\nmetric = \"speedup\"\nvalue = 1.0\n").find("give lower, upper or both"),
            std::string::npos);
  EXPECT_NE(error_for("[[reference]]\nn = 2\nmetric = \"speedup\"\nvalue = 1.0\nlower = 0.1\n").find("must lie in [-1, 0]"),
            std::string::npos);
  EXPECT_NE(error_for("[[reference]]\nn = 2\nmetric = \"speedup\"\nvalue = 1.0\nlower = -0.1\ntolerance = 3\n")
                .find("unknown key 'tolerance'"),
            std::string::npos);
  EXPECT_NE(error_for("[[reference]]\nn = \"two\"\n").find("n must be the rank count"), std::string::npos);
  const std::string missing = [&] {
    try {
      load_references((dir / "none.toml").string());
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  }();
  EXPECT_NE(missing.find("no such file"), std::string::npos);
  fs::remove_all(dir);
}

}  // namespace refs
}  // namespace
}  // namespace aiscale::sweep
