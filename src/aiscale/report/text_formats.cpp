// Markdown and CSV renderers.
#include "aiscale/report/text_formats.h"

#include <fmt/format.h>

#include "aiscale/core/fs.h"
#include "aiscale/report/escape.h"
#include "aiscale/report/tables.h"

namespace aiscale::report {
namespace {

using nlohmann::json;

// A Markdown table cell: pipes escaped, line breaks flattened, HTML tags neutralised.
std::string md_cell(const std::string& text) {
  return replace_chars(text, {{'|', "\\|"}, {'\n', " "}, {'\r', " "}, {'<', "&lt;"}, {'>', "&gt;"},
                              {'\\', "\\\\"}, {'`', "\\`"}});
}

std::string number_field(const json& v) {
  if (!v.is_number()) return "";
  if (v.is_number_integer()) return std::to_string(v.get<int64_t>());
  return fmt::format("{}", v.get<double>());
}

}  // namespace

std::string csv_field(std::string_view text, bool is_text) {
  std::string value(text);
  if (is_text && !value.empty() && (value[0] == '=' || value[0] == '+' || value[0] == '-' || value[0] == '@'))
    value = "'" + value;
  if (value.find_first_of(",\"\r\n") == std::string::npos) return value;
  std::string out = "\"";
  for (char c : value) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

std::string render_markdown(const std::vector<json>& studies) {
  std::string names;
  for (const json& d : studies) names += (names.empty() ? "" : ", ") + d["study"]["display_name"].get<std::string>();
  std::string out = "# aiscale report: " + md_cell(names) + "\n\n";
  out += fmt::format("Generated {} by aiscale {}.\n", utc_iso8601(), AISCALE_VERSION);
  for (const Table& t : build_tables(studies)) {
    out += "\n## " + md_cell(t.title) + "\n\n" + md_cell(t.caption) + "\n\n";
    if (t.rows.empty()) {
      out += "None.\n";
      continue;
    }
    out += "|";
    for (const auto& c : t.columns) out += fmt::format(" {} |", md_cell(c));
    out += "\n|";
    for (size_t i = 0; i < t.columns.size(); ++i) out += " --- |";
    out += "\n";
    for (const auto& row : t.rows) {
      out += "|";
      for (const auto& cell : row) out += fmt::format(" {} |", md_cell(cell));
      out += "\n";
    }
  }
  return out;
}

std::string render_csv(const std::vector<json>& studies) {
  const char* spreads[] = {"throughput_per_device", "throughput_total", "tflops_per_device", "mfu"};
  const char* figures[] = {"step_time_median_s", "speedup", "efficiency"};
  const char* weak[] = {"epoch", "train", "median_batch"};
  const char* resources[] = {"peak_memory_bytes", "power_w", "sm_clock_mhz", "gpu_utilization_pct"};
  std::string out = "study,kind,series,source,precision,unit,n,repeats";
  for (const char* s : spreads) out += fmt::format(",{0}_median,{0}_min,{0}_max", s);
  for (const char* f : figures) out += std::string(",") + f;
  for (const char* w : weak) out += std::string(",weak_efficiency_") + w;
  for (const char* r : resources) out += std::string(",") + r;
  out += ",stragglers\n";
  for (const json& d : studies)
    for (const json& s : d["series"])
      for (const json& p : s["points"]) {
        std::vector<std::string> row = {
            csv_field(d["study"]["display_name"].get<std::string>(), true),
            csv_field(d["study"]["kind"].get<std::string>(), true),
            csv_field(s["label"].get<std::string>(), true), csv_field(s["source"].get<std::string>(), true),
            csv_field(s["precision"].get<std::string>(), true),
            csv_field(d["study"]["unit"].get<std::string>(), true), number_field(p["n"]),
            number_field(p["repeats"])};
        for (const char* key : spreads)
          for (const char* bound : {"median", "min", "max"})
            row.push_back(p[key].is_object() ? number_field(p[key][bound]) : "");
        for (const char* f : figures) row.push_back(number_field(p[f]));
        for (const char* w : weak)
          row.push_back(p["weak_efficiency"].is_object() ? number_field(p["weak_efficiency"][w]) : "");
        for (const char* r : resources) row.push_back(number_field(p[r]));
        std::string stragglers;
        for (const json& st : p["stragglers"])
          stragglers += fmt::format("{}{}:{}", stragglers.empty() ? "" : ";", number_field(st["rank"]),
                                    number_field(st["slower_by"]));
        row.push_back(csv_field(stragglers, true));
        for (size_t i = 0; i < row.size(); ++i) out += (i ? "," : "") + row[i];
        out += "\n";
      }
  return out;
}

}  // namespace aiscale::report
