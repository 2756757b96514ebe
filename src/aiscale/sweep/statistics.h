// The statistics of a scaling study (formulas in docs/guide/scaling.md#statistics): speedup and
// efficiency, the three weak-scaling efficiencies, per-device throughput, FLOP/s and MFU,
// spread over repeats, per-batch step-time distributions, an Amdahl fit and stragglers.
// Pure functions of the per-step records, so they are tested on fixed inputs.
#pragma once
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace aiscale::sweep {

// --- per-step records (steps.jsonl) ---------------------------------------------------
struct StepRow {
  int rank = 0;
  int64_t step = 0, epoch = 0;
  double step_time_s = 0, data_wait_s = 0, sync_s = 0, loss = 0;
  int64_t tokens = 0, samples = 0;
  bool first_in_epoch = false, last_in_epoch = false, warmup = false;
};
struct EpochRow {
  int64_t epoch = 0, first_step = 0, last_step = 0;
  double wall_s = 0, train_s = 0, val_s = 0;
  bool complete = false;
};
struct RunRecords {
  std::vector<StepRow> steps;
  std::vector<EpochRow> epochs;
  std::vector<nlohmann::json> events;  // per-rank events: memory, gpu_power
  int world = 0;                       // ranks seen in the step records
};
// Reads steps.jsonl; a line cut short by a crash (the last one) is skipped. Throws
// aiscale::Error naming the file when it is missing or a middle line is malformed.
RunRecords read_step_records(const std::string& path);

// Which steps are measured: steps first..last (1-based, inclusive), or those of one epoch.
// Warm-up steps and, when leave_out_epoch_edges, the first and last batch of each epoch
// are never measured.
struct Window {
  int64_t first_step = 1, last_step = std::numeric_limits<int64_t>::max();
  int64_t epoch = -1;  // >= 0: only steps of this epoch (0-based)
  bool leave_out_epoch_edges = true;
  bool contains(const StepRow& r) const;
};

// Time per global batch of every measured step: the slowest rank's step time (the step
// ends for the job when its last rank ends it), in step order.
std::vector<double> global_step_times(const RunRecords& r, const Window& w);
// Each rank's median busy time (step time minus its time in the trainer's all-reduces:
// a rank that waits for others is not slow) over the measured steps; index = rank.
std::vector<double> rank_median_busy_times(const RunRecords& r, const Window& w);
// Where a measured step's time goes, from the step records: per step the slowest rank's
// row (the one that ends the step), its time in the batch source (data_wait_s), in the
// trainer's host-visible all-reduces (communication_s: on GPU ranks that reduce their
// gradient buckets inside backward, only what the step waits for after it) and the rest
// (compute_s); each the mean over the measured steps, so the three add up to the mean
// step time. Nullopt without measured steps.
struct StepSplit {
  double compute_s = 0, communication_s = 0, data_wait_s = 0;
  int64_t steps = 0;
};
std::optional<StepSplit> step_split(const RunRecords& r, const Window& w);
nlohmann::json to_json(const StepSplit& s);
// Tokens and samples one rank processes per step (from the first measured step).
int64_t tokens_per_rank_step(const RunRecords& r, const Window& w);
int64_t samples_per_rank_step(const RunRecords& r, const Window& w);

// --- the statistics ---------------------------------------------------------------------
struct Spread {
  double median = 0, min = 0, max = 0;
};
Spread spread_of(const std::vector<double>& values);  // all 0 for no values
nlohmann::json to_json(const Spread& s);

// S(n) = T(n0) / T(n): time per global batch at the smallest count n0 over that at n.
double speedup(double time_base, double time_n);
// Strong scaling: E(n) = S(n) * n0 / n (1 when the time falls as 1/n).
double strong_efficiency(double time_base, int n_base, double time_n, int n);
// Weak scaling and the language e(n): per-device throughput at n over that at n0.
double throughput_ratio(double per_device_base, double per_device_n);
// Weak scaling's speedup: total throughput at n over that at n0 = e(n) * n / n0.
double weak_speedup(double per_device_base, int n_base, double per_device_n, int n);

// Per-device throughput over the measured epochs: samples one rank processed in them over
// their summed wall time (use = "wall") or training time ("train"); nullopt when the
// window holds no complete epoch.
std::optional<double> epoch_throughput_per_device(const RunRecords& r, const Window& w, const std::string& use);

// TFLOP/s from a throughput (tokens/s) and the FLOPs one token costs in training.
double tflops(double tokens_per_s, double flops_per_token);
// Model FLOPs utilisation: achieved over peak (nullopt where the peak is unknown, <= 0).
std::optional<double> mfu(double achieved_tflops, double peak_tflops);

// Amdahl's law on strong scaling, T(n) = T1 * (f + (1 - f) / n), fitted by least squares
// as T(n) = a + b / n: f = a / (a + b). residual_rms (seconds) and residual_rms_relative
// (of the mean time) measure how far the times are from the law. nullopt with fewer than
// two distinct counts.
struct AmdahlFit {
  double serial_fraction = 0;
  double residual_rms = 0;
  double residual_rms_relative = 0;
  double t1 = 0;  // a + b: the fitted one-rank time
  int counts = 0;  // distinct rank counts: with 2 the line is determined, not fitted
};
std::optional<AmdahlFit> fit_amdahl(const std::vector<int>& counts, const std::vector<double>& times);

// Ranks whose median busy time exceeds the median over all ranks by more than margin
// (0.05 = 5%); slower_by = rank median / median of ranks - 1.
struct Straggler {
  int rank = 0;
  double median_step_s = 0;
  double slower_by = 0;
};
std::vector<Straggler> find_stragglers(const std::vector<double>& rank_medians, double margin = 0.05);

}  // namespace aiscale::sweep
