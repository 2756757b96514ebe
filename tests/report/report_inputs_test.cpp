// `aiscale report`'s inputs (analysis files, study directories, train run directories),
// its bad-input errors, and the command line end to end.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "aiscale/report/inputs.h"
#include "../support/error_of.h"
#include "../support/run_support.h"

namespace aiscale::report {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testsupport::error_of;
using testsupport::read_bytes;
using testsupport::run_aiscale;
using testsupport::temp_dir;

std::string fixture(const std::string& name) {
  return std::string(AISCALE_TEST_DATA_DIR) + "/report/fixtures/" + name;
}

TEST(ReportInputs, AnalysisFileStudyDirectoryAndFolder) {
  StudyInput file = load_report_input(fixture("strong_aiscale_pytorch.json"));
  EXPECT_EQ(file.analysis["study"]["name"], "gpt2-124m-strong");
  EXPECT_EQ(file.files_read, std::vector<std::string>{fixture("strong_aiscale_pytorch.json")});

  const fs::path dir = temp_dir("report-inputs");
  fs::create_directories(dir / "folder");
  fs::copy_file(fixture("weak_two_precisions.json"), dir / "folder" / "analysis.json");
  EXPECT_EQ(load_report_input((dir / "folder").string()).analysis["study"]["kind"], "weak");

  // A study directory (study.json) is analysed from its points (sweep/analysis.h; the
  // studies of tests/sweep cover that); an index that is not a study's is refused, naming it.
  fs::create_directories(dir / "study");
  std::ofstream(dir / "study" / "study.json") << R"({"format": "aiscale-study", "version": 1})";
  std::string e = error_of([&] { load_report_input((dir / "study").string()); });
  EXPECT_NE(e.find("study.json"), std::string::npos) << e;
  fs::remove_all(dir);
}

TEST(ReportInputs, TrainRunDirectoryIsAOnePointStudy) {
  StudyInput run = load_report_input(fixture("run_two_ranks"));
  const json& a = run.analysis;
  EXPECT_EQ(a["study"]["kind"], "run");
  EXPECT_EQ(a["study"]["name"], "run_two_ranks");
  EXPECT_NE(a["study"]["workload"].get<std::string>().find("GPT gpt-mini (7.2 M parameters), batch 8×64"), std::string::npos)
      << a["study"]["workload"];
  EXPECT_EQ(a["environment"]["date"], "2026-11-22T10:00:00Z");
  // Where and with what, from environment.json: every rank's host once, the version with
  // its commit, the compiler and the libraries found (the empty ones left out).
  EXPECT_EQ(a["environment"]["host"], "node01, node02");
  EXPECT_EQ(a["environment"]["aiscale_version"], "0.1.0 (0123abc)");
  EXPECT_EQ(a["environment"]["software"],
            json({{"compiler", "GCC 12.2.0"}, {"mpi", "Open MPI v4.1.4"}, {"openblas", "OpenBLAS 0.3.21"}}));
  const json& p = a["series"][0]["points"][0];
  EXPECT_EQ(a["series"][0]["label"], "aiscale fp32");
  EXPECT_EQ(p["n"], 2);
  EXPECT_DOUBLE_EQ(p["throughput_total"]["median"].get<double>(), 4000.0);  // summary's median
  EXPECT_DOUBLE_EQ(p["throughput_total"]["min"].get<double>(), 3900.0);     // first step left out
  EXPECT_DOUBLE_EQ(p["throughput_per_device"]["max"].get<double>(), 2100.0);
  EXPECT_DOUBLE_EQ(p["step_time_median_s"].get<double>(), 0.256);
  EXPECT_EQ(a["cdf"][0]["step_times_s"], json({0.244, 0.25, 0.256, 0.256, 0.263}));  // metrics.jsonl
  ASSERT_EQ(a["loss_curves"].size(), 2u);
  EXPECT_EQ(a["loss_curves"][0]["loss"].size(), 6u);
  EXPECT_EQ(a["loss_curves"][1]["label"], "aiscale fp32 validation");
  EXPECT_EQ(a["loss_curves"][1]["step"], json({4, 6}));  // the last from summary.json
  EXPECT_EQ(a["loss_curves"][1]["loss"], json({8.1, 6.9}));
  // The schedule, the gradient norm and the throughput of every logged step.
  const json& t = a["training_curves"][0];
  EXPECT_EQ(t["step"].size(), 6u);
  EXPECT_DOUBLE_EQ(t["lr"][1].get<double>(), 0.0006);
  EXPECT_DOUBLE_EQ(t["grad_norm"][2].get<double>(), 2.5);
  EXPECT_DOUBLE_EQ(t["tokens_per_s"][1].get<double>(), 4000.0);
  EXPECT_TRUE(p["step_split"].is_null());  // no steps.jsonl
  EXPECT_EQ(a["study"]["command"], "aiscale launch -n 2 -- train --config " + fixture("run_two_ranks") + "/config.toml");
}

TEST(ReportInputs, StepsJsonlGivesTheStepTimesWithoutEpochEdgesAndWarmup) {
  const json a = load_report_input(fixture("run_with_steps")).analysis;
  EXPECT_EQ(a["series"][0]["points"][0]["n"], 2);  // ranks seen in steps.jsonl, no summary yet
  EXPECT_EQ(a["cdf"][0]["step_times_s"], json({0.29, 0.30, 0.31, 0.32}));  // rank 0, steps 2..5
  // Steps 2..5, the slower rank's row each: (0.31 + 0.31 + 0.30 + 0.33) / 4 = 0.3125 s a
  // step, 0.001 s of it waiting for data and 0.05 s in all-reduces.
  const json& split = a["series"][0]["points"][0]["step_split"];
  EXPECT_NEAR(split["compute_s"].get<double>(), 0.3125 - 0.051, 1e-12);
  EXPECT_NEAR(split["communication_s"].get<double>(), 0.05, 1e-12);
  EXPECT_NEAR(split["data_wait_s"].get<double>(), 0.001, 1e-12);
  EXPECT_EQ(split["steps"], 4);
  EXPECT_NE(a["study"]["workload"].get<std::string>().find("unfinished"), std::string::npos);
}

TEST(ReportInputs, BadInputsFailNamingTheInput) {
  EXPECT_NE(error_of([] { load_report_input("/nonexistent/analysis.json"); }).find("'/nonexistent/analysis.json' does not exist"),
            std::string::npos);
  std::string e = error_of([] { load_report_input(fixture("truncated.json")); });
  EXPECT_NE(e.find(fixture("truncated.json") + "' is not valid JSON"), std::string::npos) << e;
  e = error_of([] { load_report_input(fixture("wrong_format.json")); });
  EXPECT_NE(e.find("its format is 'aiscale-bench-language'"), std::string::npos) << e;
  e = error_of([] { load_report_input(fixture("")); });
  EXPECT_NE(e.find("is neither a study directory"), std::string::npos) << e;

  const fs::path dir = temp_dir("report-bad");
  fs::create_directories(dir / "run");
  std::ofstream(dir / "run" / "metrics.jsonl") << "{\"step\":1,\"loss\":2}\n{\"step\":2,\"lo";
  e = error_of([&] { load_report_input((dir / "run").string()); });
  EXPECT_NE(e.find("metrics.jsonl' line 2 is not a JSON record"), std::string::npos) << e;
  std::ofstream(dir / "run" / "metrics.jsonl", std::ios::trunc) << "";
  EXPECT_NE(error_of([&] { load_report_input((dir / "run").string()); }).find("has no logged steps yet"), std::string::npos);
  // A file that cannot be read (as root every file can: then a folder where the file should be).
  fs::create_directories(dir / "unreadable");
  if (::geteuid() != 0) {
    std::ofstream(dir / "unreadable" / "a.json") << "{}";
    fs::permissions(dir / "unreadable" / "a.json", fs::perms::none);
    e = error_of([&] { load_report_input((dir / "unreadable" / "a.json").string()); });
    EXPECT_NE(e.find("cannot read"), std::string::npos) << e;
  }
  fs::create_directories(dir / "unreadable" / "analysis.json");
  e = error_of([&] { load_report_input((dir / "unreadable").string()); });
  EXPECT_NE(e.find((dir / "unreadable" / "analysis.json").string()), std::string::npos) << e;
  fs::remove_all(dir);
}

TEST(ReportCommand, WritesEachFormatAndRefusesToOverwriteAnInput) {
  const fs::path dir = temp_dir("report-cli");
  const std::string strong = fixture("strong_aiscale_pytorch.json"), weak = fixture("weak_two_precisions.json");
  auto r = run_aiscale("report " + strong + " " + weak + " -o " + (dir / "out" / "r.html").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("report (html): 2 studies, 4 series, 10 points, 7 charts -> " + (dir / "out" / "r.html").string()),
            std::string::npos) << r.output;
  EXPECT_NE(read_bytes(dir / "out" / "r.html").find("vega-embed"), std::string::npos);

  r = run_aiscale("report " + strong + " -o " + (dir / "r.csv").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(read_bytes(dir / "r.csv").rfind("study,kind,series", 0), 0u);
  r = run_aiscale("report " + strong + " --format md -o " + (dir / "r.txt").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(read_bytes(dir / "r.txt").rfind("# aiscale report: gpt2-124m-strong", 0), 0u);

  fs::copy_file(strong, dir / "a.json");
  const std::string before = read_bytes(dir / "a.json");
  r = run_aiscale("report " + (dir / "a.json").string() + " -o " + (dir / "a.json").string());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("is an input of the report"), std::string::npos) << r.output;
  EXPECT_EQ(read_bytes(dir / "a.json"), before);

  // A bad input leaves no output behind.
  r = run_aiscale("report " + strong + " " + fixture("wrong_format.json") + " -o " + (dir / "bad.html").string());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("wrong_format.json' is not a study analysis"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir / "bad.html"));
  r = run_aiscale("report " + strong + " -o " + dir.string());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("is a directory"), std::string::npos) << r.output;

  // The Vega libraries come from AISCALE_VEGA_DIR when set.
  r = run_aiscale("report " + strong + " -o " + (dir / "v.html").string(), "AISCALE_VEGA_DIR=/nonexistent");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("/nonexistent/vega/build/vega.min.js"), std::string::npos) << r.output;
  fs::remove_all(dir);
}

}  // namespace
// --predict names one partition of the planner's catalogue; an analysis file alone (no
// study directory with its points' runs) gets no prediction, and the report says so.
TEST(ReportInputs, PredictNamesAPartitionAndNeedsTheStudyDirectory) {
  const fs::path dir = testsupport::temp_dir("report-predict");
  const std::string input = std::string(AISCALE_TEST_DATA_DIR) + "/report/fixtures/strong_aiscale_pytorch.json";
  auto r = testsupport::run_aiscale("report " + input + " -o " + (dir / "r.md").string() + " --predict nosuch");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("unknown system 'nosuch'"), std::string::npos) << r.output;
  r = testsupport::run_aiscale("report " + input + " -o " + (dir / "r.md").string() + " --predict cosma8");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("--predict cosma8: name one partition"), std::string::npos) << r.output;
  r = testsupport::run_aiscale("report " + input + " -o " + (dir / "r.md").string() + " --predict lumi/lumi-c");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("no input is a study directory"), std::string::npos) << r.output;
  EXPECT_EQ(testsupport::read_bytes(dir / "r.md").find("Measured against the planner"), std::string::npos);
  fs::remove_all(dir);
}

}  // namespace aiscale::report
