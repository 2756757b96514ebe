// `aiscale report` draws a tune directory: the time-vs-models chart from --scaling and the
// best-score-vs-trials chart from a search; both drawn in headless Chromium.
#include <gtest/gtest.h>

#include <fstream>

#include "../support/chromium.h"
#include "../support/run_support.h"
#include "aiscale/report/inputs.h"

using namespace aiscale::testsupport;

namespace {

TEST(TuneReport, ScalingAndSearchBecomeCharts) {
  const fs::path dir = temp_dir("tune-report");
  std::ofstream(dir / "s.toml") << "[study]\nname = \"rep\"\nbackend = \"mlp\"\nfolds = 2\ntrials = 4\nthreads = 2\ndir = \""
                                << (dir / "out").string() << "\"\n[data]\nsource = \"synthetic\"\nsynthetic_rows = 200\n"
                                << "[fixed]\nepochs = 2\n[params.hidden]\ntype = \"int\"\nlow = 2\nhigh = 8\n";
  const std::string cfg = (dir / "s.toml").string();
  auto r = run_aiscale("tune " + cfg + " --scaling 1,10 -q");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // A directory of --scaling runs only is a report input too.
  auto scaling_only = aiscale::report::load_report_input((dir / "out").string());
  EXPECT_EQ(scaling_only.analysis["study"]["kind"], "tune");
  EXPECT_EQ(scaling_only.analysis["tune"]["scaling"].size(), 2u);
  r = run_aiscale("tune " + cfg + " -q");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto in = aiscale::report::load_report_input((dir / "out").string());
  const auto& trials = in.analysis["tune"]["trials"];
  ASSERT_EQ(trials.size(), 4u);
  for (size_t i = 1; i < trials.size(); ++i)  // rmse: the best so far never rises
    EXPECT_LE(trials[i]["best"].get<double>(), trials[i - 1]["best"].get<double>());
  r = run_aiscale("report " + (dir / "out").string() + " -o " + (dir / "r.html").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string html = read_bytes(dir / "r.html");
  EXPECT_NE(html.find("Time against models"), std::string::npos);
  EXPECT_NE(html.find("Best score against trials"), std::string::npos);
  r = run_aiscale("report " + (dir / "out").string() + " -o " + (dir / "r.md").string());
  EXPECT_EQ(r.exit_code, 0) << r.output;
  fs::remove_all(dir);
}

}  // namespace

namespace {

// Both tune charts are drawn by Vega-Lite in headless Chromium without errors.
TEST(TuneReport, ChartsDrawInChromium) {
  const fs::path dir = temp_dir("tune-report-chromium");
  std::ofstream(dir / "s.toml") << "[study]\nname = \"rep\"\nfolds = 2\ntrials = 3\nthreads = 2\ndir = \""
                                << (dir / "out").string() << "\"\n[data]\nsource = \"synthetic\"\nsynthetic_rows = 100\n"
                                << "[fixed]\nepochs = 1\n[params.hidden]\ntype = \"int\"\nlow = 2\nhigh = 8\n";
  const std::string cfg = (dir / "s.toml").string();
  ASSERT_EQ(run_aiscale("tune " + cfg + " --scaling 1,10 -q").exit_code, 0);
  ASSERT_EQ(run_aiscale("tune " + cfg + " -q").exit_code, 0);
  auto r = run_aiscale("report " + (dir / "out").string() + " -o " + (dir / "r.html").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  BrowserView v = open_in_chromium(dir / "r.html", dir);
  EXPECT_EQ(v.status["done"], "true") << v.status["text"] << "\n" << v.log;
  EXPECT_EQ(v.status["charts"], "2");
  EXPECT_EQ(v.status["rendered"], "2") << v.status["text"];
  EXPECT_EQ(v.status["errors"], "0") << v.status["text"];
  for (const char* id : {"tune_time", "tune_best"}) EXPECT_TRUE(chart_drawn(v.dom, id)) << id;
  fs::remove_all(dir);
}

}  // namespace
