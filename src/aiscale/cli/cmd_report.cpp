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
  auto a = std::make_shared<ReportArgs>();
  auto* cmd = app.add_subcommand(
      "report",
      "Draw scaling studies or a train run as one offline HTML page (Vega-Lite charts, tables), "
      "Markdown or CSV");
  cmd->add_option("inputs", a->inputs,
                  "a study directory (study.json), a folder holding analysis.json, an analysis JSON "
                  "file (format aiscale-study-analysis) or a train run directory (metrics.jsonl)")
      ->required();
  cmd->add_option("-o,--output", a->output,
                  "file to write (atomically; never one of the inputs); parent folders are created")
      ->required();
  cmd->add_option("--format", a->format,
                  "html (default), md or csv; without it, a .md or .csv output name chooses")
      ->check(CLI::IsMember({"html", "md", "csv"}));
  cmd->add_option("--predict", a->predict.target,
                  "SYSTEM/PARTITION of the planner's catalogue: beside each measured point, the "
                  "planner's step time and throughput per device for the same run (model, ranks, "
                  "batch, precision, layout) there, and the measurement over the prediction");
  cmd->add_option("--systems", a->predict.systems,
                  "with --predict: an extra catalogue file (e.g. this host as a system; repeatable)");
  cmd->add_option("--calibration", a->predict.calibration,
                  "with --predict: measured results that calibrate the planner (as plan --calibration; "
                  "repeatable)");
  cmd->footer(
      "HTML: one self-contained file that works offline. Charts: efficiency against n (weak "
      "scaling: full epoch, training part, median batch), speedup against ideal, per-batch "
      "step-time CDF per n, throughput per device by precision and source, loss curves, power "
      "and SM clock per n (when measured). Tables: figures per point, environment (device, "
      "software, date, command), Amdahl fit, failed points, the planner's predictions with "
      "--predict, and the machine profile when the "
      "directory holds machine-profile.toml (docs/guide/machine-profile.md). Several inputs are drawn side by "
      "side, their labels prefixed with the study name.\n"
      "md: the tables in Markdown. csv: one row per series point.\n"
      "The page inlines vega, vega-lite and vega-embed read from $AISCALE_VEGA_DIR, else "
      "third_party_npm/node_modules in the source tree (scripts/setup.sh installs them).\n"
      "See docs/guide/report.md.");
  cmd->callback([a] { run_report(*a); });
}

}  // namespace aiscale::cli
