// HTML page assembly.
#include "aiscale/report/html.h"

#include <regex>

#include <fmt/format.h>

#include "aiscale/core/fs.h"
#include "aiscale/report/escape.h"

namespace aiscale::report {
namespace {

using nlohmann::json;

const char* kStyle = R"(
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 1.5rem 2rem; color: #1d1d1f; }
h1 { margin-bottom: 0.2rem; } h2 { margin-top: 2rem; border-bottom: 1px solid #ddd; padding-bottom: 0.2rem; }
.subtitle { color: #555; margin-top: 0; }
.charts { display: flex; flex-wrap: wrap; gap: 1.5rem; }
figure.chart-figure { margin: 0; padding: 0.6rem 0.8rem; border: 1px solid #e3e3e3; border-radius: 6px; flex: 0 0 540px; overflow-x: auto; }
figure.chart-figure h3 { margin: 0 0 0.4rem 0; font-size: 1.05rem; }
figcaption { color: #555; font-size: 0.85rem; margin-top: 0.4rem; }
.table-wrap { overflow-x: auto; }
table { border-collapse: collapse; font-size: 0.85rem; }
th, td { border: 1px solid #ddd; padding: 0.25rem 0.5rem; text-align: left; vertical-align: top; }
th { background: #f4f4f6; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.caption, .empty { color: #555; font-size: 0.9rem; }
.status { color: #555; font-size: 0.85rem; } .status.bad { color: #b00020; font-weight: bold; }
footer { margin-top: 2rem; color: #777; font-size: 0.8rem; }
)";

// Runs before the libraries so that an error while they load is caught too.
const char* kErrorCatcher = R"(
window.aiscaleReportErrors = [];
window.addEventListener('error', function (e) {
  window.aiscaleReportErrors.push('script error: ' + (e.message || e.type));
});
window.addEventListener('unhandledrejection', function (e) {
  window.aiscaleReportErrors.push('unhandled rejection: ' + (e.reason && e.reason.message ? e.reason.message : String(e.reason)));
});
(function () {
  var original = console.error;
  console.error = function () {
    window.aiscaleReportErrors.push('console error: ' + Array.prototype.map.call(arguments, String).join(' '));
    return original.apply(console, arguments);
  };
})();
)";

const char* kChartRunner = R"(
(function () {
  'use strict';
  var errors = window.aiscaleReportErrors, rendered = 0, done = false;
  var status = document.getElementById('aiscale-report-status');
  function publish() {
    status.setAttribute('data-rendered', String(rendered));
    status.setAttribute('data-errors', String(errors.length));
    status.setAttribute('data-done', done ? 'true' : 'false');
    status.textContent = (done ? rendered + ' of ' + charts.length + ' charts drawn' : 'drawing charts…') +
      (errors.length ? '; errors: ' + errors.join(' | ') : '');
    status.className = errors.length || (done && rendered < charts.length) ? 'status bad' : 'status';
  }
  if (typeof vegaEmbed !== 'function') {
    errors.push('vega-embed did not load');
    done = true;
    publish();
    return;
  }
  var options = {mode: 'vega-lite', renderer: 'svg',
                 actions: {export: true, source: false, compiled: false, editor: false}};
  Promise.all(charts.map(function (chart) {
    var element = document.getElementById('chart-' + chart.id);
    return vegaEmbed(element, chart.spec, options)
      .then(function (result) { return result.view.runAsync(); })
      .then(function () {
        if (element.querySelector('svg, canvas')) rendered += 1;
        else errors.push(chart.id + ': nothing was drawn');
      })
      .catch(function (e) { errors.push(chart.id + ': ' + (e && e.message ? e.message : String(e))); });
  })).then(function () { done = true; publish(); });
})();
)";

// Figures are right-aligned: a cell whose first word is a number ("370,000 (…) tokens/s").
bool looks_numeric(const std::string& cell) {
  static const std::regex number("^-?[0-9][0-9,]*(\\.[0-9]+)?(e[+-]?[0-9]+)?( .*)?$");
  return std::regex_match(cell, number);
}

void append_table(std::string& out, const Table& t) {
  out += fmt::format("<h2 id=\"table-{}\">{}</h2>\n<p class=\"caption\">{}</p>\n", html_escape(t.id),
                     html_escape(t.title), html_escape(t.caption));
  if (t.rows.empty()) {
    out += "<p class=\"empty\">None.</p>\n";
    return;
  }
  out += fmt::format("<div class=\"table-wrap\"><table id=\"{}\">\n<thead><tr>", html_escape(t.id));
  for (const auto& c : t.columns) out += "<th>" + html_escape(c) + "</th>";
  out += "</tr></thead>\n<tbody>\n";
  for (const auto& row : t.rows) {
    out += "<tr>";
    for (const auto& cell : row)
      out += (looks_numeric(cell) ? "<td class=\"num\">" : "<td>") + html_escape(cell) + "</td>";
    out += "</tr>\n";
  }
  out += "</tbody></table></div>\n";
}

}  // namespace

std::string html_escape(std::string_view text) {
  return replace_chars(text,
                       {{'&', "&amp;"}, {'<', "&lt;"}, {'>', "&gt;"}, {'"', "&quot;"}, {'\'', "&#39;"}});
}

std::string json_for_script(const json& value) {
  return replace_chars(value.dump(-1, ' ', /*ensure_ascii=*/true, json::error_handler_t::replace),
                       {{'<', "\\u003c"}, {'>', "\\u003e"}, {'&', "\\u0026"}});
}

PageContent page_content(const std::vector<json>& studies) {
  PageContent c;
  std::string names;
  for (const json& d : studies) names += (names.empty() ? "" : ", ") + d["study"]["display_name"].get<std::string>();
  c.title = "aiscale report: " + names;
  c.subtitle = fmt::format("{} {} · generated {} by aiscale {}", studies.size(),
                           studies.size() == 1 ? "study" : "studies side by side", utc_iso8601(), AISCALE_VERSION);
  c.charts = build_charts(studies);
  c.tables = build_tables(studies);
  return c;
}

std::string render_html_page(const PageContent& content, const std::vector<JsLibrary>& libraries) {
  std::string out;
  out += "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
         "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  out += "<title>" + html_escape(content.title) + "</title>\n<style>" + kStyle + "</style>\n";
  out += std::string("<script>") + kErrorCatcher + "</script>\n";
  for (const auto& lib : libraries)
    out += fmt::format("<script>/* {} {} */\n{}\n</script>\n", lib.package, lib.version, lib.code);
  out += "</head>\n<body>\n";
  out += "<h1>" + html_escape(content.title) + "</h1>\n<p class=\"subtitle\">" + html_escape(content.subtitle) + "</p>\n";

  // Environment first: a measured result is read with its card, date and command.
  auto table_named = [&](const std::string& id) -> const Table* {
    for (const auto& t : content.tables)
      if (t.id == id) return &t;
    return nullptr;
  };
  if (const Table* env = table_named("environment")) append_table(out, *env);

  out += "<h2 id=\"charts\">Charts</h2>\n";
  if (content.charts.empty()) out += "<p class=\"empty\">No chart: the analysis holds no measured point.</p>\n";
  out += "<div class=\"charts\">\n";
  json charts = json::array();
  for (const auto& chart : content.charts) {
    out += fmt::format("<figure class=\"chart-figure\"><h3>{}</h3><div class=\"chart\" id=\"chart-{}\"></div>"
                       "<figcaption>{}</figcaption></figure>\n",
                       html_escape(chart.title), html_escape(chart.id), html_escape(chart.caption));
    charts.push_back({{"id", chart.id}, {"spec", chart.spec}});
  }
  out += "</div>\n";
  out += fmt::format("<p id=\"aiscale-report-status\" class=\"status\" data-charts=\"{}\" data-rendered=\"0\" "
                     "data-errors=\"0\" data-done=\"false\">charts need JavaScript</p>\n",
                     content.charts.size());
  for (const auto& t : content.tables)
    if (t.id != "environment") append_table(out, t);

  std::string versions;
  for (const auto& lib : libraries) versions += (versions.empty() ? "" : ", ") + lib.package + " " + lib.version;
  out += "<footer>Drawn offline with " + html_escape(versions) + " (inlined). Each chart's menu saves it as SVG or PNG.</footer>\n";
  out += "<script>\nvar charts = " + json_for_script(charts) + ";\n" + kChartRunner + "</script>\n";
  out += "</body>\n</html>\n";
  return out;
}

}  // namespace aiscale::report
