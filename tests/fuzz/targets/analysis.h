// The report's analysis JSON (report/analysis.h): read and validated as `aiscale report`
// reads a file, then turned into the page's charts and tables, Markdown and CSV.
#pragma once
#include "../fuzz_support.h"
#include "aiscale/report/html.h"
#include "aiscale/report/inputs.h"
#include "aiscale/report/text_formats.h"

namespace aiscale::fuzz {

inline int fuzz_analysis(const uint8_t* data, size_t size) {
  const std::filesystem::path path = scratch_dir() / "analysis.json";
  write_bytes(path, as_text(data, size));
  return expect_user_errors([&] {
    std::vector<report::StudyInput> inputs{report::load_report_input(path.string())};
    const std::vector<nlohmann::json> studies = report::label_studies(inputs);
    (void)report::page_content(studies);
    (void)report::render_markdown(studies);
    (void)report::render_csv(studies);
  });
}

}  // namespace aiscale::fuzz
