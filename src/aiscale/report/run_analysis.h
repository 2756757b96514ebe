// One train run seen as a study of one point, so `aiscale report RUN_DIR` draws its loss
// curve, throughput and step-time distribution with the same renderer as a study.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace aiscale::report {

// Reads RUN_DIR/metrics.jsonl (required), summary.json (absent while the run is going),
// config.toml and steps.jsonl (per-rank, per-step records) when present, and returns an
// analysis document of kind "run" (see docs/guide/report.md). The step-time distribution comes
// from steps.jsonl (the lowest rank's steps, warm-up and each epoch's first and last batch
// left out) or, without it, from metrics.jsonl's step_time_s (the first step left out).
// Adds every file it read to `files_read`.
nlohmann::json analyze_run_directory(const std::string& dir, std::vector<std::string>& files_read);

}  // namespace aiscale::report
