// The report renderers on hand-written analyses: validation, tables, charts, Markdown,
// CSV and the HTML page's escaping.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "aiscale/report/analysis.h"
#include "aiscale/report/charts.h"
#include "aiscale/report/html.h"
#include "aiscale/report/inputs.h"
#include "aiscale/report/tables.h"
#include "aiscale/report/text_formats.h"
#include "aiscale/report/vega_assets.h"
#include "../support/error_of.h"

namespace aiscale::report {
namespace {

using nlohmann::json;
using testsupport::error_of;

std::string fixture(const std::string& name) {
  return std::string(AISCALE_TEST_DATA_DIR) + "/report/fixtures/" + name;
}

json strong_doc() { return read_json_file(fixture("strong_aiscale_pytorch.json")); }
json weak_doc() { return read_json_file(fixture("weak_two_precisions.json")); }

std::vector<json> labelled(std::vector<json> docs) {
  std::vector<StudyInput> in;
  for (auto& d : docs) in.push_back({"test", validate_analysis(d, "test.json"), {}});
  return label_studies(in);
}

const Chart* chart_named(const std::vector<Chart>& charts, const std::string& id) {
  for (const auto& c : charts)
    if (c.id == id) return &c;
  return nullptr;
}

const Table& table_named(const std::vector<Table>& tables, const std::string& id) {
  for (const auto& t : tables)
    if (t.id == id) return t;
  throw std::runtime_error("no table " + id);
}

TEST(ReportAnalysis, AcceptsTheFixturesAndFillsOptionalParts) {
  json doc = strong_doc();
  doc.erase("loss_curves");
  doc["series"][1].erase("source");
  json v = validate_analysis(doc, "strong.json");
  EXPECT_TRUE(v["loss_curves"].is_array() && v["loss_curves"].empty());
  EXPECT_EQ(v["series"][1]["source"], "aiscale");
  EXPECT_NO_THROW(validate_analysis(weak_doc(), "weak.json"));
}

TEST(ReportAnalysis, NamesTheFileAndTheFieldOfAProblem) {
  json doc = strong_doc();
  doc["series"][0]["points"][1].erase("n");
  std::string e = error_of([&] { validate_analysis(doc, "a/analysis.json"); });
  EXPECT_NE(e.find("'a/analysis.json'"), std::string::npos) << e;
  EXPECT_NE(e.find("series[0].points[1].n"), std::string::npos) << e;
  EXPECT_NE(e.find("missing"), std::string::npos) << e;

  doc = strong_doc();
  doc["series"][1]["points"][2]["efficiency"] = "high";
  e = error_of([&] { validate_analysis(doc, "x.json"); });
  EXPECT_NE(e.find("series[1].points[2].efficiency"), std::string::npos) << e;
  EXPECT_NE(e.find("a number or null, not a string"), std::string::npos) << e;

  doc = strong_doc();
  doc["study"]["kind"] = "sideways";
  EXPECT_NE(error_of([&] { validate_analysis(doc, "x.json"); }).find("study.kind"), std::string::npos);

  doc = strong_doc();
  doc["loss_curves"][0]["loss"].erase(0);
  EXPECT_NE(error_of([&] { validate_analysis(doc, "x.json"); }).find("loss_curves[0]"), std::string::npos);

  doc = strong_doc();
  doc.erase("environment");
  EXPECT_NE(error_of([&] { validate_analysis(doc, "x.json"); }).find("'environment' is missing"), std::string::npos);
}

TEST(ReportAnalysis, RejectsOtherFormatsAndVersions) {
  json doc = strong_doc();
  doc["format"] = "aiscale-bench-language";
  std::string e = error_of([&] { validate_analysis(doc, "b.json"); });
  EXPECT_NE(e.find("format is 'aiscale-bench-language', expected 'aiscale-study-analysis'"), std::string::npos) << e;
  doc["format"] = "aiscale-study";
  EXPECT_NE(error_of([&] { validate_analysis(doc, "study.json"); }).find("give the study directory"), std::string::npos);
  doc = strong_doc();
  doc["version"] = 2;
  EXPECT_NE(error_of([&] { validate_analysis(doc, "v.json"); }).find("version 2"), std::string::npos);
  EXPECT_NE(error_of([&] { validate_analysis(json::array(), "arr.json"); }).find("expected a JSON object"), std::string::npos);
}

TEST(ReportAnalysis, PrefixesLabelsWithStudyNamesSideBySide) {
  auto studies = labelled({strong_doc(), weak_doc()});
  EXPECT_EQ(studies[0]["series"][1]["label"], "gpt2-124m-strong: PyTorch DDP bf16");
  EXPECT_EQ(studies[1]["cdf"][0]["label"], "gpt-mini-weak-cpu: aiscale fp32");
  auto same = labelled({strong_doc(), strong_doc()});
  EXPECT_EQ(same[1]["series"][0]["label"], "gpt2-124m-strong #2: aiscale bf16");
  auto one = labelled({strong_doc()});
  EXPECT_EQ(one[0]["series"][0]["label"], "aiscale bf16");
}

TEST(ReportCharts, StrongStudyDrawsEveryChartWithItsFigures) {
  auto charts = build_charts(labelled({strong_doc()}));
  for (const char* id : {"efficiency", "speedup", "cdf", "throughput", "loss", "power", "clock"})
    ASSERT_NE(chart_named(charts, id), nullptr) << id;
  const json& eff = chart_named(charts, "efficiency")->spec["data"]["values"];
  EXPECT_EQ(eff.size(), 6u);  // 2 series × 3 n, strong: throughput efficiency only
  EXPECT_TRUE(std::any_of(eff.begin(), eff.end(), [](const json& r) {
    return r["series"] == "PyTorch DDP bf16" && r["n"] == 4 && r["efficiency"] == 0.875;
  }));
  const json& thr = chart_named(charts, "throughput")->spec["data"]["values"];
  EXPECT_TRUE(std::any_of(thr.begin(), thr.end(), [](const json& r) {
    return r["source"] == "pytorch" && r["n"] == 2 && r["median"] == 300000 && r["min"] == 299000;
  }));
  const json& speed = chart_named(charts, "speedup")->spec["layer"][1]["data"]["values"];
  EXPECT_EQ(speed.back()["speedup"], 4.0);  // ideal from n=1 to n=4
  // power: only the aiscale points measured it
  EXPECT_EQ(chart_named(charts, "power")->spec["data"]["values"].size(), 3u);
}

TEST(ReportCharts, WeakStudyDrawsTheThreeTimings) {
  auto charts = build_charts(labelled({weak_doc()}));
  const json& eff = chart_named(charts, "efficiency")->spec["data"]["values"];
  int timings = 0;
  for (const json& r : eff)
    if (r["n"] == 2 && r["series"] == "aiscale bf16") ++timings;
  EXPECT_EQ(timings, 4);  // epoch, train, median batch, throughput per device
  EXPECT_TRUE(std::any_of(eff.begin(), eff.end(), [](const json& r) {
    return r["timing"] == "training part" && r["series"] == "aiscale fp32" && r["efficiency"] == 0.88;
  }));
  EXPECT_EQ(chart_named(charts, "power"), nullptr);  // nothing measured, no chart
  const json& loss = chart_named(charts, "loss")->spec["data"]["values"];
  EXPECT_EQ(loss.back()["curve"], "aiscale fp32 · n=2 · repeat 2");
}

TEST(ReportCharts, CdfPointsAreThinnedKeepingEnds) {
  std::vector<double> t(1000);
  for (size_t i = 0; i < t.size(); ++i) t[i] = 0.001 * static_cast<double>(i);
  auto p = cdf_points(t, 11);
  ASSERT_EQ(p.size(), 11u);
  EXPECT_DOUBLE_EQ(p.front().first, 0.0);
  EXPECT_DOUBLE_EQ(p.front().second, 0.001);
  EXPECT_DOUBLE_EQ(p.back().first, 0.999);
  EXPECT_DOUBLE_EQ(p.back().second, 1.0);
  EXPECT_EQ(cdf_points({0.5}, 400).size(), 1u);
}

TEST(ReportTables, PointsEnvironmentAndFailedPoints) {
  auto tables = build_tables(labelled({strong_doc()}));
  const Table& points = table_named(tables, "points");
  ASSERT_EQ(points.rows.size(), 6u);
  EXPECT_EQ(points.rows[2][1], "aiscale bf16");
  EXPECT_EQ(points.rows[2][2], "4");
  EXPECT_EQ(points.rows[2][4], "370,000 (365,000–372,000) tokens/s");
  EXPECT_EQ(points.rows[2][9], "—");  // this study's records have no step split
  EXPECT_EQ(points.rows[2][11], "0.925");
  EXPECT_EQ(points.rows[2][17], "rank 3 (+12 %)");
  EXPECT_EQ(points.rows[5][6], "—");  // PyTorch: no TFLOP/s
  const Table& env = table_named(tables, "environment");
  EXPECT_EQ(env.rows[0][3], "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(env.rows[0][7], "CUDA 13.0, NCCL 2.27.7, PyTorch 2.9.0");
  EXPECT_EQ(env.rows[0][9], "aiscale scale studies/gpt2-124m-strong.toml");
  const Table& failed = table_named(tables, "failed");
  ASSERT_EQ(failed.rows.size(), 1u);
  EXPECT_EQ(failed.rows[0][1], "n8-bf16-r1");
  EXPECT_EQ(table_named(tables, "amdahl").rows[1][4], "0.048");
}

TEST(ReportText, MarkdownHasEveryTableAndEscapesCells) {
  json doc = strong_doc();
  doc["failed_points"][0]["reason"] = "a | b <script>";
  std::string md = render_markdown(labelled({doc, weak_doc()}));
  for (const char* heading : {"## Figures per point", "## Environment", "## Failed points", "## Amdahl fit per series"})
    EXPECT_NE(md.find(heading), std::string::npos) << heading;
  EXPECT_NE(md.find("| gpt2-124m-strong | n8-bf16-r1 | a \\| b &lt;script&gt; |"), std::string::npos) << md;
  EXPECT_NE(md.find("| gpt-mini-weak-cpu | gpt-mini-weak-cpu: aiscale bf16 | 2 |"), std::string::npos);
}

TEST(ReportText, CsvHasOneRowPerSeriesPoint) {
  std::string csv = render_csv(labelled({strong_doc(), weak_doc()}));
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 1 + 6 + 4);
  EXPECT_EQ(csv.substr(0, csv.find('\n')).substr(0, 60),
            "study,kind,series,source,precision,unit,n,repeats,throughput");
  EXPECT_NE(csv.find("gpt2-124m-strong,strong,gpt2-124m-strong: PyTorch DDP bf16,pytorch,bf16,tokens/s,4,3,"
                     "280000,277000,281000,1120000,1108000,1124000,,,,,,,0.05851,3.5,0.875,,,,,,,,\n"),
            std::string::npos) << csv;
  EXPECT_NE(csv.find(",0.86,0.88,0.9,"), std::string::npos);
  EXPECT_EQ(csv_field("a,\"b\"", true), "\"a,\"\"b\"\"\"");
  EXPECT_EQ(csv_field("=cmd()", true), "'=cmd()");
  EXPECT_EQ(csv_field("-0.5", false), "-0.5");
}

TEST(ReportHtml, EscapesEveryTextAndScriptContent) {
  json doc = strong_doc();
  const std::string evil = "</script><script>alert('x')</script>&<b>";
  doc["study"]["name"] = evil;
  doc["series"][0]["label"] = evil;
  doc["failed_points"][0]["reason"] = evil;
  const PageContent page = page_content(labelled({doc}));
  std::vector<JsLibrary> libs{{"fake", "1", "fake.js", inline_script_safe("var s = '</SCRIPT>'; /* <!-- */")}};
  const std::string html = render_html_page(page, libs);
  EXPECT_EQ(html.find("<script>alert"), std::string::npos);
  EXPECT_EQ(html.find("</SCRIPT>"), std::string::npos);
  EXPECT_NE(html.find("var s = '<\\/SCRIPT>'; /* <\\x21-- */"), std::string::npos);
  EXPECT_NE(html.find("&lt;/script&gt;&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&amp;&lt;b&gt;"), std::string::npos);
  // the label inside the chart data is a \u-escaped JSON string
  EXPECT_NE(html.find("\\u003c/script\\u003e\\u003cscript\\u003ealert('x')"), std::string::npos);
  // one container per chart, and the status element the browser check reads
  for (const auto& c : page.charts) EXPECT_NE(html.find("id=\"chart-" + c.id + "\""), std::string::npos);
  EXPECT_NE(html.find("id=\"aiscale-report-status\" class=\"status\" data-charts=\"7\""), std::string::npos);
  EXPECT_EQ(json_for_script(json("é<&>")), "\"\\u00e9\\u003c\\u0026\\u003e\"");
}

TEST(ReportHtml, VegaLibrariesAreFoundOrTheErrorSaysHow) {
  const std::string e = error_of([] { load_vega_libraries("/nonexistent/node_modules"); });
  EXPECT_NE(e.find("/nonexistent/node_modules/vega/build/vega.min.js"), std::string::npos) << e;
  EXPECT_NE(e.find("scripts/setup.sh"), std::string::npos) << e;
  EXPECT_NE(e.find("AISCALE_VEGA_DIR"), std::string::npos) << e;
  auto libs = load_vega_libraries();  // installed by scripts/setup.sh
  ASSERT_EQ(libs.size(), 3u);
  EXPECT_EQ(libs[0].package, "vega");
  EXPECT_EQ(libs[2].package, "vega-embed");
  EXPECT_FALSE(libs[1].version.empty());
  EXPECT_GT(libs[0].code.size(), 100000u);
}

}  // namespace
}  // namespace aiscale::report
