#include "aiscale/profile/op_profiler.h"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>

#include "aiscale/core/enum_names.h"

namespace aiscale::profile {
namespace {

// The wall clock read once, then advanced by the steady clock: spans of one process never
// jump with clock adjustments, and the ranks of a job share (about) one time axis.
struct Origin {
  std::chrono::steady_clock::time_point steady = std::chrono::steady_clock::now();
  double wall_us = std::chrono::duration<double, std::micro>(
                       std::chrono::system_clock::now().time_since_epoch()).count();
};
const Origin& origin() {
  static const Origin o;
  return o;
}

}  // namespace

const char* span_kind_name(SpanKind k) {
  static constexpr EnumName<SpanKind> kinds[] = {{SpanKind::op, "op"},     {SpanKind::phase, "phase"},
                                                 {SpanKind::data, "data"}, {SpanKind::comm, "comm"},
                                                 {SpanKind::step, "step"}};
  return enum_name(kinds, k, "op");
}

OpProfiler::OpProfiler(int rank, int64_t first_step, int64_t steps)
    : rank_(rank), first_step_(first_step), steps_(steps) {
  origin();
  spans_.reserve(1u << 14);
  name_track(kHostTrack, "host: stepping thread");
  name_track(kDataTrack, "host: data loading");
  name_track(kCommTrack, "host: communication");
}

double OpProfiler::now_us() const {
  const Origin& o = origin();
  return o.wall_us +
         std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - o.steady).count();
}

void OpProfiler::begin_step(int64_t step_index) {
  if (!in_window(step_index)) return;
  recording_ = true;
  step_start_us_ = now_us();
}

void OpProfiler::end_step(int64_t step_index, double step_time_s) {
  if (!recording_) return;
  const double end = now_us();
  spans_.push_back({fmt::format("step {}", step_index + 1), SpanKind::step, kHostTrack,
                    step_start_us_, end - step_start_us_, 0, 0, -1, {}, {}});
  step_times_s_.push_back(step_time_s);
  ++recorded_steps_;
  recording_ = false;
}

void OpProfiler::resolve() {
  for (DeviceSpanSource* s : sources_) s->resolve(*this);
  sources_.clear();
  std::stable_sort(spans_.begin(), spans_.end(), [](const Span& a, const Span& b) {
    return a.track != b.track ? a.track < b.track : a.start_us < b.start_us;
  });
}

void OpProfiler::name_track(int track, std::string name) {
  for (auto& [t, n] : track_names_)
    if (t == track) {
      n = std::move(name);
      return;
    }
  track_names_.emplace_back(track, std::move(name));
}

}  // namespace aiscale::profile
