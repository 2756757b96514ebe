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
#include "../support/run_helpers.h"

namespace aiscale::report {
namespace {

namespace fs = std::filesystem;
using testsupport::run_aiscale;
using testsupport::run_command;
using testsupport::temp_dir;

std::string fixture(const std::string& name) {
  return std::string(AISCALE_TEST_DATA_DIR) + "/report/fixtures/" + name;
}

// $AISCALE_CHROMIUM, else `chromium` on PATH; "" when there is none.
std::string chromium_binary() {
  if (const char* env = std::getenv("AISCALE_CHROMIUM"); env != nullptr && *env != '\0') return env;
  auto r = run_command("command -v chromium");
  if (r.exit_code != 0) return "";
  return r.output.substr(0, r.output.find('\n'));
}

struct BrowserView {
  std::string dom;                           // the DOM after the page ran
  std::map<std::string, std::string> status; // data-* of #aiscale-report-status, and "text"
  std::string log;                           // Chromium's own output
};

BrowserView open_in_chromium(const fs::path& html, const fs::path& work) {
  const std::string chromium = chromium_binary();
  BrowserView v;
  if (chromium.empty()) {
    ADD_FAILURE() << "chromium is not installed, so the HTML report cannot be checked: run "
                     "scripts/setup.sh (apt package chromium) or set AISCALE_CHROMIUM";
    return v;
  }
  const fs::path profile = work / "chromium-profile", dom = work / "dom.html", log = work / "chromium.log";
  fs::create_directories(profile);
  const std::string cmd =
      "timeout 90 " + chromium + " --headless --no-sandbox --disable-gpu --disable-quic --no-first-run "
      "--disable-background-networking --disable-component-update --disable-sync "
      "--user-data-dir=" + profile.string() + " --virtual-time-budget=20000 --dump-dom 'file://" +
      fs::absolute(html).string() + "' > " + dom.string() + " 2> " + log.string();
  auto r = run_command(cmd);
  v.dom = testsupport::read_bytes(dom);
  v.log = testsupport::read_bytes(log);
  EXPECT_EQ(r.exit_code, 0) << "chromium failed: " << r.output << v.log;
  std::smatch m;
  if (!std::regex_search(v.dom, m, std::regex("<p id=\"aiscale-report-status\"([^>]*)>([^<]*)</p>"))) {
    ADD_FAILURE() << "no status element in the page Chromium ran; its log:\n" << v.log;
    return v;
  }
  const std::string attrs = m[1].str();
  v.status["text"] = m[2].str();
  std::regex attr("data-([a-z]+)=\"([^\"]*)\"");
  for (auto it = std::sregex_iterator(attrs.begin(), attrs.end(), attr); it != std::sregex_iterator(); ++it)
    v.status[(*it)[1].str()] = (*it)[2].str();
  return v;
}

// Whether the chart container `id` holds an <svg> or <canvas> in the DOM Chromium returned
// (read from the DOM itself, not from the page's own bookkeeping).
bool chart_drawn(const std::string& dom, const std::string& id) {
  const size_t start = dom.find("id=\"chart-" + id + "\"");
  if (start == std::string::npos) return false;
  const size_t end = dom.find("</figure>", start);
  const std::string inside = dom.substr(start, end - start);
  return inside.find("<svg") != std::string::npos || inside.find("<canvas") != std::string::npos;
}

TEST(ReportChromium, EveryChartIsDrawnWithoutErrors) {
  const fs::path dir = temp_dir("report-chromium");
  const fs::path html = dir / "report.html";
  auto r = run_aiscale("report " + fixture("strong_aiscale_pytorch.json") + " " +
                       fixture("weak_two_precisions.json") + " " + fixture("run_two_ranks") + " -o " + html.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  BrowserView v = open_in_chromium(html, dir);
  EXPECT_EQ(v.status["done"], "true") << v.status["text"] << "\n" << v.log;
  EXPECT_EQ(v.status["charts"], "7");
  EXPECT_EQ(v.status["rendered"], "7") << v.status["text"];
  EXPECT_EQ(v.status["errors"], "0") << v.status["text"];
  for (const char* id : {"efficiency", "speedup", "cdf", "throughput", "loss", "power", "clock"})
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
