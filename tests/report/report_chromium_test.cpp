// The HTML report opened in headless Chromium (Debian's `chromium`): every chart is drawn
// (an <svg> in its container) and no script or console error is reported. A page with one
// broken chart must fail the same check, so the check can fail.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <string>

#include "aiscale/core/fs.h"
#include "aiscale/report/html.h"
#include "aiscale/report/inputs.h"
#include "../support/chromium.h"
#include "../support/run_support.h"

namespace aiscale::report {
namespace {

namespace fs = std::filesystem;
using testsupport::run_aiscale;
using testsupport::run_command;
using testsupport::temp_dir;
using testsupport::BrowserView;
using testsupport::chart_drawn;
using testsupport::open_in_chromium;

std::string fixture(const std::string& name) {
  return std::string(AISCALE_TEST_DATA_DIR) + "/report/fixtures/" + name;
}

TEST(ReportChromium, EveryChartIsDrawnWithoutErrors) {
  const fs::path dir = temp_dir("report-chromium");
  const fs::path html = dir / "report.html";
  auto r = run_aiscale("report " + fixture("strong_aiscale_pytorch.json") + " " +
                       fixture("weak_two_precisions.json") + " " + fixture("run_two_ranks") + " " +
                       fixture("run_with_steps") + " -o " + html.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  BrowserView v = open_in_chromium(html, dir);
  EXPECT_EQ(v.status["done"], "true") << v.status["text"] << "\n" << v.log;
  EXPECT_EQ(v.status["charts"], "9");
  EXPECT_EQ(v.status["rendered"], "9") << v.status["text"];
  EXPECT_EQ(v.status["errors"], "0") << v.status["text"];
  for (const char* id : {"efficiency", "speedup", "cdf", "throughput", "split", "loss", "training",
                         "power", "clock"})
    EXPECT_TRUE(chart_drawn(v.dom, id)) << id << " has no <svg> or <canvas>";
  EXPECT_EQ(v.log.find("Uncaught"), std::string::npos) << v.log;
  fs::remove_all(dir);
}

TEST(ReportChromium, ABrokenChartFailsTheCheck) {
  const fs::path dir = temp_dir("report-chromium-broken");
  StudyInput in = load_report_input(fixture("run_two_ranks"));
  PageContent page = page_content(label_studies({in}));
  const size_t good = page.charts.size();
  page.charts.push_back({"broken", "Broken chart", "a spec Vega-Lite cannot compile",
                         {{"data", {{"values", nlohmann::json::array({{{"x", 1}}})}}},
                          {"mark", "no-such-mark"},
                          {"encoding", {{"x", {{"field", "x"}, {"type", "quantitative"}}}}}}});
  atomic_write_file((dir / "broken.html").string(), render_html_page(page, load_vega_libraries()));
  BrowserView v = open_in_chromium(dir / "broken.html", dir);
  EXPECT_EQ(v.status["done"], "true") << v.log;
  EXPECT_EQ(v.status["charts"], std::to_string(good + 1));
  EXPECT_EQ(v.status["rendered"], std::to_string(good)) << v.status["text"];
  EXPECT_NE(v.status["errors"], "0");
  EXPECT_NE(v.status["text"].find("broken: "), std::string::npos) << v.status["text"];
  EXPECT_FALSE(chart_drawn(v.dom, "broken"));
  EXPECT_TRUE(chart_drawn(v.dom, "loss"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace aiscale::report
