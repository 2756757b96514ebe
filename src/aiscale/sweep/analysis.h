// The analysis of a study: the figures `aiscale report` draws (format in
// docs/guide/scaling.md#the-analysis-json), computed from the point folders' files alone.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

namespace aiscale::sweep {

// Analyses STUDY_DIR (its study.json and points/*/run/steps.jsonl). With write_cache, also
// writes STUDY_DIR/analysis.json (atomically; a read-only folder only loses the cache).
// Throws aiscale::Error when study.json is missing or corrupt.
nlohmann::json analyze_study(const std::string& study_dir, bool write_cache = true);

// A comparison series from JSON lines (e.g. PyTorch DDP's scaling runs), one line per run:
//   {"source": "pytorch", "world_size": n, "precision": "bf16",
//    "tokens_per_s_per_device": x, "step_times_s": [...]}
// optional: "label", "device", "tflops_per_device", "mfu", "repeat". Returned in the same
// format as analyze_study, one series per (label or source, precision).
nlohmann::json analyze_jsonl(const std::string& path);

}  // namespace aiscale::sweep
