// The self-contained HTML report: tables, and charts drawn offline by Vega-Lite whose
// JavaScript is inlined into the page.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "aiscale/report/charts.h"
#include "aiscale/report/tables.h"
#include "aiscale/report/vega_assets.h"

namespace aiscale::report {

struct PageContent {
  std::string title;     // <title> and heading
  std::string subtitle;  // one line under the heading
  std::vector<Chart> charts;
  std::vector<Table> tables;
};

// The page's content for labelled studies (label_studies).
PageContent page_content(const std::vector<nlohmann::json>& studies);

// One HTML document. Every chart goes in <div class="chart" id="chart-ID">. When drawing
// ends, the element #aiscale-report-status carries data-charts (how many), data-rendered
// (how many have an <svg> or <canvas>), data-errors (script errors, rejected embeds and
// console errors) and data-done="true", and its text lists the errors.
std::string render_html_page(const PageContent& content, const std::vector<JsLibrary>& libraries);

// Text safe in HTML element content and attribute values.
std::string html_escape(std::string_view text);
// JSON safe inside <script>: non-ASCII, '<', '>' and '&' written as \u escapes.
std::string json_for_script(const nlohmann::json& value);

}  // namespace aiscale::report
