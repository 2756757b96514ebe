// The titles and captions of the report's charts, kept as Markdown in
// src/aiscale/report/charts.md and built into the binary (cmake/embed_text_files.cmake): a
// chart is `# id: title`, its caption the lines below, joined by spaces. What stands before
// the first chart (a comment) is not read.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "aiscale/report/embedded_text.h"

namespace aiscale::report {

struct ChartText {
  std::string title;
  std::string caption;  // what is drawn and how to read it
};

// The text of the chart `id`; a chart without one is a mistake in the program and throws
// aiscale::Error naming it.
const ChartText& chart_text(std::string_view id);

// Every chart id that report/charts.md describes, in its order.
std::vector<std::string> chart_text_ids();

// The file as built in.
extern const EmbeddedTextFile kEmbeddedChartTexts[];
extern const size_t kEmbeddedChartTextCount;

}  // namespace aiscale::report
