// A scaling study as described in a TOML file (docs/guide/scaling.md): the workload (a train
// config or a bench suite), the rank counts, strong or weak scaling, precisions, repeats,
// the measured window and the device; and the points it expands into, each with the
// aiscale arguments that run it.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace aiscale::sweep {

// The largest rank count a study may list (a million ranks; more is a typo).
inline constexpr int64_t kMaxStudyRanks = int64_t{1} << 20;

struct StudyWorkload {
  std::string type;                  // "train" | "bench"
  std::string config;                // train: the train config (absolute path)
  std::vector<std::string> set;      // train: --set overrides
  std::string suite;                 // bench: "language"
  std::vector<std::string> options;  // bench: further command-line options
  int64_t batch = 0;         // per-rank micro-batch (weak; strong with split = "grad_accum")
  int64_t global_batch = 0;  // strong: samples per optimizer step over all ranks
  int64_t grad_accum = 1;    // micro-steps per step (weak; strong with split = "batch")
  std::string split = "batch";  // strong: what shrinks as ranks grow: "batch" or "grad_accum"
};

struct StudyMeasure {
  int64_t first_step = 0, last_step = 0;  // steps N..M (1-based, inclusive); 0: epoch mode
  int64_t epoch = 0, epochs = 0;          // epoch k of K (train workloads)
};

struct Study {
  std::string name;
  std::string description;
  std::string kind = "strong";  // strong | weak
  std::vector<int> counts;
  std::vector<std::string> precisions = {"fp32"};
  int repeats = 1;
  std::string device = "cpu";
  int threads_per_rank = 0;  // CPU threads per rank; 0: cores / ranks
  StudyWorkload workload;
  StudyMeasure measure;
  std::string source_path;  // the TOML file
  std::string toml_text;    // its text, copied into the study directory

  // The resolved description (what study_id hashes): every setting with its value, and a
  // hash of the train config's text.
  nlohmann::json resolved() const;
  // 16 hex digits: FNV-1a 64 of resolved().dump().
  std::string study_id() const;
  // "train gpt-tiny.toml" / "bench language --model gpt-tiny": for titles.
  std::string workload_text() const;
};

// Reads and validates a study; throws aiscale::Error naming the file, the key and the fix.
Study load_study(const std::string& path);
// Same from text; relative paths are taken from base_dir.
Study parse_study(const std::string& toml_text, const std::string& source_name,
                  const std::string& base_dir);

struct PointSpec {
  std::string id;  // "n2-bf16-r1"
  int ranks = 1;
  std::string precision;
  int repeat = 1;
  int64_t batch = 0, grad_accum = 1;  // per rank
};

// Every point: repeats outermost (so a drift over time spreads over all counts), then
// counts, then precisions. Throws when a strong study's global batch does not divide.
std::vector<PointSpec> study_points(const Study& s);

// The aiscale arguments (after the binary) that run a point into point_dir/run.
std::vector<std::string> point_argv(const Study& s, const PointSpec& p, const std::string& point_dir);

// A train workload's point as --set overrides: the workload's own, then what the study sets
// (batch, accumulation, precision, device, steps, run directory).
std::vector<std::string> point_overrides(const Study& s, const PointSpec& p, const std::string& point_dir);

// That every point could run, checked before any does: a train workload's config with each
// point's settings, and the parallel layout of its rank count. Throws Error naming the point
// and the fix. (A bench workload's options are checked where the command line is known:
// cli/cmd_scale.cpp.)
void check_study_points(const Study& s);

// The first and last measured step of a point (epoch mode: the steps the run has).
int64_t point_total_steps(const Study& s, const PointSpec& p);

}  // namespace aiscale::sweep
