#include "aiscale/report/chart_texts.h"

#include <sstream>
#include <utility>

#include "aiscale/core/error.h"

namespace aiscale::report {
namespace {

using Texts = std::vector<std::pair<std::string, ChartText>>;

Texts parse(const std::string& text) {
  Texts out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    while (!line.empty() && (line.back() == ' ' || line.back() == '\r')) line.pop_back();
    if (line.rfind("# ", 0) == 0) {
      const size_t colon = line.find(": ");
      if (colon == std::string::npos) fail("internal: report/charts.md: '{}' is not '# id: title'", line);
      out.push_back({line.substr(2, colon - 2), {line.substr(colon + 2), ""}});
    } else if (!line.empty() && !out.empty()) {
      std::string& caption = out.back().second.caption;
      caption += (caption.empty() ? "" : " ") + line;
    }
  }
  return out;
}

const Texts& texts() {
  static const Texts all = [] {
    Texts t;
    for (size_t i = 0; i < kEmbeddedChartTextCount; ++i) {
      Texts file = parse(kEmbeddedChartTexts[i].text);
      t.insert(t.end(), file.begin(), file.end());
    }
    return t;
  }();
  return all;
}

}  // namespace

const ChartText& chart_text(std::string_view id) {
  for (const auto& [name, text] : texts())
    if (name == id) return text;
  fail("internal: src/aiscale/report/charts.md has no chart '{}'", id);
}

std::vector<std::string> chart_text_ids() {
  std::vector<std::string> ids;
  for (const auto& [name, text] : texts()) ids.push_back(name);
  return ids;
}

}  // namespace aiscale::report
