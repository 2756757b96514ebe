#include "aiscale/train/trace_writer.h"

#include <fmt/format.h>

#include "aiscale/core/fs.h"

namespace aiscale::train {

using profile::kHostTrack;
using profile::OpProfiler;
using profile::Span;
using profile::SpanKind;

nlohmann::json trace_events(const OpProfiler& p, const std::string& host) {
  const int pid = p.rank();
  nlohmann::json ev = nlohmann::json::array();
  ev.push_back({{"name", "process_name"}, {"ph", "M"}, {"ts", 0}, {"pid", pid}, {"tid", 0},
                {"args", {{"name", fmt::format("rank {} ({})", pid, host)}}}});
  ev.push_back({{"name", "process_sort_index"}, {"ph", "M"}, {"ts", 0}, {"pid", pid}, {"tid", 0},
                {"args", {{"sort_index", pid}}}});
  for (const auto& [track, name] : p.track_names())
    ev.push_back({{"name", "thread_name"}, {"ph", "M"}, {"ts", 0}, {"pid", pid}, {"tid", track},
                  {"args", {{"name", name}}}});
  double first = 0, last = 0;
  bool any = false;
  for (const Span& s : p.spans()) {
    nlohmann::json e = {{"name", s.name},
                        {"cat", span_kind_name(s.kind)},
                        {"ph", "X"},
                        {"ts", s.start_us},
                        {"dur", s.dur_us},
                        {"pid", pid},
                        {"tid", s.track}};
    nlohmann::json args = nlohmann::json::object();
    if (s.flops > 0) args["flops"] = s.flops;
    if (s.bytes > 0) args["bytes"] = s.bytes;
    if (s.bucket >= 0) args["bucket"] = s.bucket;
    if (!s.dtype.empty()) args["dtype"] = s.dtype;
    if (!s.collective.empty()) args["collective"] = s.collective;
    if (s.kind == SpanKind::comm && s.bytes > 0 && s.dur_us > 0)
      args["gb_per_s"] = s.bytes / (s.dur_us * 1e3);  // bytes / ns = GB/s
    if (!args.empty()) e["args"] = args;
    ev.push_back(std::move(e));
    if (!any || s.start_us < first) first = s.start_us;
    if (!any || s.start_us + s.dur_us > last) last = s.start_us + s.dur_us;
    any = true;
  }
  if (any) {  // the window as a range of its own, above the steps
    const std::string window = fmt::format("profiled steps {}..{}", p.first_step() + 1,
                                           p.first_step() + p.steps());
    ev.push_back({{"name", window}, {"cat", "window"}, {"ph", "B"}, {"ts", first}, {"pid", pid},
                  {"tid", kHostTrack}});
    ev.push_back({{"name", window}, {"cat", "window"}, {"ph", "E"}, {"ts", last}, {"pid", pid},
                  {"tid", kHostTrack}});
  }
  return ev;
}

std::vector<std::string> gather_text(parallel::Communicator& comm, const std::string& mine) {
  const int world = comm.world();
  if (world == 1) return {mine};
  std::vector<double> sizes(static_cast<size_t>(world), 0.0);
  sizes[static_cast<size_t>(comm.rank())] = static_cast<double>(mine.size());
  comm.allreduce_sum(sizes.data(), world);
  std::vector<std::string> all;
  for (int r = 0; r < world; ++r) {
    std::string buf = r == comm.rank() ? mine : std::string(static_cast<size_t>(sizes[r]), '\0');
    if (!buf.empty()) comm.broadcast_bytes(buf.data(), static_cast<int64_t>(buf.size()), r);
    if (comm.rank() == 0) all.push_back(std::move(buf));
  }
  return all;
}

void write_trace(const OpProfiler& p, parallel::Communicator& comm, const std::string& path) {
  const std::vector<std::string> ranks = gather_text(comm, trace_events(p, host_name()).dump());
  if (comm.rank() != 0) return;
  nlohmann::json events = nlohmann::json::array();
  for (const std::string& text : ranks)
    for (auto& e : nlohmann::json::parse(text)) events.push_back(std::move(e));
  nlohmann::json trace = {{"traceEvents", std::move(events)},
                          {"displayTimeUnit", "ms"},
                          {"otherData", {{"producer", "aiscale --profile"},
                                         {"version", AISCALE_VERSION},
                                         {"ranks", comm.world()}}}};
  atomic_write_file(path, trace.dump() + "\n");
}

}  // namespace aiscale::train
