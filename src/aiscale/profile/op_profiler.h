// The op profiler behind `--profile STEPS`: for a window of training steps after warm-up
// it records timed spans (each op of the model, the phases of a step, data loading, the
// collectives) on the host, and on GPUs the ops of each stream through CUDA events that
// are read only after the window (gpu_op_recorder.cuh), so the profiled steps run as the
// others do. Out of the window, and in a run without --profile, nothing is recorded: the
// model holds its plain op table and the trainer's hooks test a null pointer.
//
// What becomes of the spans: an op table (op_table.h) and a Chrome trace-event file that
// Perfetto and chrome://tracing open (train/trace_writer.h).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace aiscale::profile {

// The rows of the trace a span belongs to (the trace's thread ids within a rank).
enum Track : int {
  kHostTrack = 0,   // the stepping thread
  kDataTrack = 1,   // batches being read (on the stepping thread, shown apart)
  kCommTrack = 2,   // collectives issued by the host
  kGpuTrack = 16,   // GPU stream i is kGpuTrack + i
  // The data-parallel communicator's stream (gradient buckets, gathers, ZeRO-1's weight
  // all-gather): its spans overlap the model stream's, so the op table keeps them apart.
  kGpuCommTrack = 32,
};

// What a span is: an op of the model (a row of the op table), a phase enclosing ops
// (forward, backward, update), data loading or communication (rows of the table too), or
// a whole step.
enum class SpanKind : uint8_t { op, phase, data, comm, step };
const char* span_kind_name(SpanKind k);

struct Span {
  std::string name;
  SpanKind kind = SpanKind::op;
  int track = kHostTrack;
  double start_us = 0;  // microseconds since the Unix epoch
  double dur_us = 0;
  double flops = 0;     // work of one call, where known (0: unknown)
  double bytes = 0;     // memory traffic of one call, where known (0: unknown)
  // Collectives on a device stream: the gradient bucket (-1: none), the element type
  // and the collective's name (empty: not a collective). Shown as the event's args.
  int bucket = -1;
  std::string dtype, collective;
};

class OpProfiler;

// A source of spans that are only known after the window (a GPU stream's events).
class DeviceSpanSource {
 public:
  virtual ~DeviceSpanSource() = default;
  // Waits for the device and adds its spans to `into`.
  virtual void resolve(OpProfiler& into) = 0;
};

class OpProfiler {
 public:
  // Profiles `steps` steps from step index `first_step` (0-based) on.
  OpProfiler(int rank, int64_t first_step, int64_t steps);

  int rank() const { return rank_; }
  int64_t first_step() const { return first_step_; }
  int64_t steps() const { return steps_; }
  // Whether step_index is one of the profiled steps.
  bool in_window(int64_t step_index) const {
    return step_index >= first_step_ && step_index < first_step_ + steps_;
  }
  bool recording() const { return recording_; }
  // Microseconds since the Unix epoch on a steady clock (one origin per process).
  double now_us() const;

  void begin_step(int64_t step_index);
  // Ends a profiled step: its span and its measured time (the trainer's step time).
  void end_step(int64_t step_index, double step_time_s);
  bool window_done() const { return recorded_steps_ == steps_; }

  void add(Span s) {
    if (recording_) spans_.push_back(std::move(s));
  }
  // Device spans are added by resolve(), after the window.
  void add_resolved(Span s) { spans_.push_back(std::move(s)); }
  void add_device_source(DeviceSpanSource* source) { sources_.push_back(source); }
  // Reads the device spans (waits for the devices); call once after the window.
  void resolve();

  // Names the tracks of this rank (shown in the trace).
  void name_track(int track, std::string name);
  const std::vector<std::pair<int, std::string>>& track_names() const { return track_names_; }

  const std::vector<Span>& spans() const { return spans_; }
  const std::vector<double>& step_times_s() const { return step_times_s_; }

 private:
  int rank_;
  int64_t first_step_, steps_;
  bool recording_ = false;
  int64_t recorded_steps_ = 0;
  double step_start_us_ = 0;
  std::vector<Span> spans_;
  std::vector<double> step_times_s_;
  std::vector<DeviceSpanSource*> sources_;
  std::vector<std::pair<int, std::string>> track_names_;
};

// Times a scope into a profiler; does nothing (one branch) when the profiler is null or
// not recording.
class ScopedSpan {
 public:
  ScopedSpan(OpProfiler* p, const char* name, SpanKind kind, int track = kHostTrack,
             double flops = 0, double bytes = 0)
      : p_(p && p->recording() ? p : nullptr), name_(name), kind_(kind), track_(track),
        flops_(flops), bytes_(bytes) {
    if (p_) start_us_ = p_->now_us();
  }
  ~ScopedSpan() {
    if (p_)
      p_->add({name_, kind_, track_, start_us_, p_->now_us() - start_us_, flops_, bytes_, -1, {}, {}});
  }
  ScopedSpan(const ScopedSpan&) = delete;
  ScopedSpan& operator=(const ScopedSpan&) = delete;

 private:
  OpProfiler* p_;
  const char* name_;
  SpanKind kind_;
  int track_;
  double flops_, bytes_;
  double start_us_ = 0;
};

}  // namespace aiscale::profile
