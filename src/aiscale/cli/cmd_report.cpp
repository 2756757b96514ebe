// `aiscale report`: draw study analyses (or one train run) as an offline HTML page, or
// write their tables as Markdown or their points as CSV.
//   aiscale report STUDY_DIR_OR_ANALYSIS_OR_RUN_DIR... -o report.html [--format html|md|csv]
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "aiscale/cli/commands.h"
#include "aiscale/cli/help_text.h"
#include "aiscale/core/error.h"
#include "aiscale/core/fs.h"
#include "aiscale/report/predictions.h"
#include "aiscale/report/html.h"
#include "aiscale/report/inputs.h"
#include "aiscale/report/text_formats.h"
#include "aiscale/report/vega_assets.h"

namespace aiscale::cli {
namespace {

namespace fs = std::filesystem;

struct ReportArgs {
  std::vector<std::string> inputs;
  std::string output;
  std::string format;  // "": from the output's extension
  report::PredictOptions predict;  // --predict: the planner's prediction beside each point
};

std::string format_of(const ReportArgs& a) {
  if (!a.format.empty()) return a.format;
  const std::string ext = fs::path(a.output).extension().string();
  if (ext == ".md" || ext == ".markdown") return "md";
  if (ext == ".csv") return "csv";
  return "html";
}

// The output must not replace anything the report was made from.
void refuse_to_overwrite_inputs(const std::string& output, const std::vector<report::StudyInput>& inputs) {
  std::error_code ec;
  if (fs::is_directory(output, ec))
    fail("the output '{}' is a directory: give a file name, e.g. -o {}/report.html", output, output);
  if (!fs::exists(output, ec)) return;
  for (const auto& in : inputs) {
    std::vector<std::string> read = in.files_read;
    read.push_back(in.source);
    for (const auto& f : read)
      if (fs::equivalent(output, f, ec))
        fail("the output '{}' is an input of the report ('{}'): choose another -o file", output, f);
  }
}

void run_report(const ReportArgs& a) {
  const std::string format = format_of(a);
  std::vector<report::StudyInput> inputs;
  for (const auto& path : a.inputs) inputs.push_back(report::load_report_input(path));
  refuse_to_overwrite_inputs(a.output, inputs);
  std::vector<nlohmann::json> studies = report::label_studies(inputs);
  if (!a.predict.target.empty()) report::add_predictions(studies, a.predict);

  std::string content, detail;
  size_t series = 0, points = 0;
  for (const auto& d : studies) {
    series += d["series"].size();
    for (const auto& s : d["series"]) points += s["points"].size();
  }
  if (format == "html") {
    const report::PageContent page = report::page_content(studies);
    content = report::render_html_page(page, report::load_vega_libraries());
    detail = fmt::format(", {} charts", page.charts.size());
  } else if (format == "md") {
    content = report::render_markdown(studies);
  } else {
    content = report::render_csv(studies);
  }
  const fs::path parent = fs::path(a.output).parent_path();
  if (!parent.empty()) fs::create_directories(parent);
  atomic_write_file(a.output, content);
  std::printf("report (%s): %zu %s, %zu series, %zu %s%s -> %s (%s)\n", format.c_str(), studies.size(),
              studies.size() == 1 ? "study" : "studies", series, points, points == 1 ? "point" : "points",
              detail.c_str(), a.output.c_str(),
              content.size() >= 1024 * 1024 ? fmt::format("{:.1f} MiB", content.size() / 1048576.0).c_str()
                                             : fmt::format("{:.0f} KiB", content.size() / 1024.0).c_str());
  std::fflush(stdout);
}

}  // namespace

void add_report_command(CLI::App& app) {
  const HelpSection help("report", "report");
  auto a = std::make_shared<ReportArgs>();
  auto* cmd = app.add_subcommand("report", help.about());
  help.option(cmd, "inputs", a->inputs)->required();
  help.option(cmd, "-o,--output", a->output)->required();
  help.option(cmd, "--format", a->format)->check(CLI::IsMember({"html", "md", "csv"}));
  help.option(cmd, "--predict", a->predict.target);
  help.option(cmd, "--systems", a->predict.systems);
  help.option(cmd, "--calibration", a->predict.calibration);
  cmd->footer(help.footer());
  cmd->callback([a] { run_report(*a); });
}

}  // namespace aiscale::cli
