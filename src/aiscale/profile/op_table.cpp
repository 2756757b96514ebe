#include "aiscale/profile/op_table.h"

#include <algorithm>
#include <map>
#include <numeric>

#include <fmt/format.h>

namespace aiscale::profile {

double OpTable::rows_total_s() const {
  double s = 0;
  for (const auto& r : rows)
    if (!r.overlapped) s += r.total_s;
  return s;
}

double OpTable::overlapped_total_s() const {
  double s = 0;
  for (const auto& r : rows)
    if (r.overlapped) s += r.total_s;
  return s;
}

OpTable make_op_table(const OpProfiler& p) {
  OpTable t;
  t.rank = p.rank();
  t.steps = static_cast<int64_t>(p.step_times_s().size());
  t.step_time_s = std::accumulate(p.step_times_s().begin(), p.step_times_s().end(), 0.0);
  bool device_ops = false;
  for (const Span& s : p.spans())
    if (s.kind == SpanKind::op && s.track >= kGpuTrack) device_ops = true;
  std::map<std::pair<std::string, std::string>, OpRow> rows;
  for (const Span& s : p.spans()) {
    if (s.kind == SpanKind::phase || s.kind == SpanKind::step) continue;
    const bool on_gpu = s.track >= kGpuTrack;
    // With device ops, the host's op spans are launch times: not rows.
    if (s.kind == SpanKind::op && device_ops && !on_gpu) continue;
    const std::string kind = span_kind_name(s.kind);
    OpRow& r = rows[{kind, s.name}];
    r.name = s.name;
    r.kind = kind;
    r.where = on_gpu ? "gpu" : "host";
    r.overlapped = s.track == kGpuCommTrack;
    r.calls += 1;
    r.total_s += s.dur_us * 1e-6;
    r.flops += s.flops;
    r.bytes += s.bytes;
  }
  for (auto& [key, row] : rows) t.rows.push_back(std::move(row));
  std::stable_sort(t.rows.begin(), t.rows.end(),
                   [](const OpRow& a, const OpRow& b) { return a.total_s > b.total_s; });
  return t;
}

nlohmann::json op_table_json(const OpTable& t) {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& r : t.rows) {
    nlohmann::json j = {{"op", r.name},
                        {"kind", r.kind},
                        {"where", r.where},
                        {"overlapped", r.overlapped},
                        {"calls", r.calls},
                        {"total_s", r.total_s},
                        {"mean_s", r.mean_s()},
                        {"share_of_step", t.step_time_s > 0 ? r.total_s / t.step_time_s : 0.0}};
    if (r.flops > 0) j["achieved_tflops"] = r.tflops();
    if (r.bytes > 0) j["achieved_gb_per_s"] = r.gbytes_per_s();
    rows.push_back(std::move(j));
  }
  return {{"rank", t.rank},
          {"profiled_steps", t.steps},
          {"step_time_s", t.step_time_s},
          {"rows_total_s", t.rows_total_s()},
          {"overlapped_total_s", t.overlapped_total_s()},
          {"coverage", t.coverage()},
          {"rows", rows}};
}

OpTable op_table_from_json(const nlohmann::json& j) {
  OpTable t;
  t.rank = j.at("rank").get<int>();
  t.steps = j.at("profiled_steps").get<int64_t>();
  t.step_time_s = j.at("step_time_s").get<double>();
  for (const auto& rj : j.at("rows")) {
    OpRow r;
    r.name = rj.at("op").get<std::string>();
    r.kind = rj.at("kind").get<std::string>();
    r.where = rj.at("where").get<std::string>();
    r.overlapped = rj.value("overlapped", false);
    r.calls = rj.at("calls").get<int64_t>();
    r.total_s = rj.at("total_s").get<double>();
    // The rates give back the work and the traffic.
    r.flops = rj.value("achieved_tflops", 0.0) * 1e12 * r.total_s;
    r.bytes = rj.value("achieved_gb_per_s", 0.0) * 1e9 * r.total_s;
    t.rows.push_back(std::move(r));
  }
  return t;
}

namespace {

std::string rows_markdown(const OpTable& t, bool overlapped) {
  std::string out = "| op | kind | where | calls | total (ms) | mean (us) | share of step | achieved |\n";
  out += "|---|---|---|---:|---:|---:|---:|---:|\n";
  for (const auto& r : t.rows) {
    if (r.overlapped != overlapped) continue;
    std::string rate = "";
    if (r.flops > 0 && (r.kind == "op") && r.tflops() >= 0.001 &&
        (r.name.find("matmul") != std::string::npos || r.name.find("attention") != std::string::npos))
      rate = fmt::format("{:.3f} TFLOP/s", r.tflops());
    else if (r.bytes > 0)
      rate = fmt::format("{:.1f} GB/s", r.gbytes_per_s());
    out += fmt::format("| {} | {} | {} | {} | {:.3f} | {:.1f} | {:.1f}% | {} |\n", r.name, r.kind,
                       r.where, r.calls, 1e3 * r.total_s, 1e6 * r.mean_s(),
                       t.step_time_s > 0 ? 100.0 * r.total_s / t.step_time_s : 0.0, rate);
  }
  return out;
}

}  // namespace

std::string op_table_markdown(const OpTable& t) {
  std::string out = fmt::format(
      "Rank {}: {} profiled step(s), {:.3f} ms per step; the rows account for {:.1f}% of it.\n\n",
      t.rank, t.steps, t.steps > 0 ? 1e3 * t.step_time_s / double(t.steps) : 0.0,
      100.0 * t.coverage());
  out += rows_markdown(t, false);
  if (t.overlapped_total_s() > 0) {
    out += fmt::format(
        "\nOverlapped: on the communicator's GPU stream, beside the rows above (not in their "
        "total; {:.1f}% of the step; GB/s = bytes of the buffer / time):\n\n",
        t.step_time_s > 0 ? 100.0 * t.overlapped_total_s() / t.step_time_s : 0.0);
    out += rows_markdown(t, true);
  }
  return out;
}

}  // namespace aiscale::profile
